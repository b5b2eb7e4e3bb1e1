"""Checks of env keyword arguments at construction: a bad ``gym.make`` kwarg is a one-line ``ValueError`` that
names it, not a ``TypeError`` at the first step or a silently truncated value."""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from typing import Any


def integer(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]``; an integral float (``2.0``) passes, ``2.5``, ``"2"`` and
    booleans do not."""
    integral = isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not integral:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"in [{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def number(name: str, value: Any, low: float = 0.0, high: float = 1.0, high_open: bool = False) -> float:
    """``value`` as a float in ``[low, high]`` (``[low, high)`` with ``high_open``); NaN, strings and booleans
    do not pass."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(float(value)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if value < low or value > high or (high_open and value == high):
        raise ValueError(f"{name} must be in [{low:g}, {high:g}{')' if high_open else ']'}, got {value:g}")
    return value


def choices(name: str, value: Any, known: Collection[str], allow_none: bool = True) -> list[str] | None:
    """A non-empty list of names from ``known`` (a bare string is refused: it is not a list of names)."""
    if value is None and allow_none:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection) or not value:
        raise ValueError(f"{name} must be a non-empty list of {sorted(known)}, got {value!r}")
    unknown = [v for v in value if v not in known]
    if unknown:
        raise ValueError(f"{name}: unknown {unknown}; known: {sorted(known)}")
    return list(value)
