"""Relaxed (lossy) acceptance rules for token drafts: METHODS.md §3. Being written in this session."""
