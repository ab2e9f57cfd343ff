"""Verifier registry. Importing this package registers every built-in rule (one module per family)."""

from . import action, codebook, continuous, exact, jacobi, phrase, spans, tolerance  # noqa: F401  (register their rules)
from .base import DOMAINS, VERIFIERS, BenchCase, Verifier, check_verifier, make_verifier

__all__ = ["DOMAINS", "VERIFIERS", "BenchCase", "Verifier", "check_verifier", "make_verifier"]
