"""Verifier registry. Importing this package registers every built-in rule."""

from . import exact  # noqa: F401  (registers greedy / speculative / deterministic)
from .base import VERIFIERS, Verifier, make_verifier

__all__ = ["VERIFIERS", "Verifier", "make_verifier"]
