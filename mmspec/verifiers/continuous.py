"""Continuous-state verification (reflection maximal coupling, density ratio, forecast gating): METHODS.md §5.
Being written in this session."""
