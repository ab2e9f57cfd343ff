"""Jacobi-family verification (SJD, MC-SJD, Gumbel coupling): METHODS.md §4. Being written in this session."""
