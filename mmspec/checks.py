"""Argument checks that raise the clear error every entry point gives: the argument's name, what was expected and
what was received (``ValueError("keep: expected an int in [1, 9], got 12")``)."""

from __future__ import annotations

import math
from numbers import Integral, Real


def is_int(value) -> bool:
    """An int (Python or numpy) that is not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite real number that is not a bool."""
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def check_param(name: str, value, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"{name}: expected {expected}, got {value!r}")


def check_int(name: str, value, low: int, high: int | None = None, note: str = "") -> None:
    """``value`` is an int in [low, high] (no upper bound when ``high`` is None); ``note`` says what it counts."""
    ok = is_int(value) and value >= low and (high is None or value <= high)
    check_param(name, value, ok, (f"an int >= {low}" if high is None else f"an int in [{low}, {high}]") + note)
