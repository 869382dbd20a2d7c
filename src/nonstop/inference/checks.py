"""Validation at the door for the inference schedulers: each helper returns the value normalised
or raises a TypeError/ValueError that names the bad value (STYLE: errors a user can act on).

>>> check_count("n_workers", 4), check_seconds("period", 1), check_fraction("quantile", 0.999)
(4, 1.0, 0.999)
>>> check_count("n_workers", 0)
Traceback (most recent call last):
...
ValueError: n_workers must be >= 1, got 0
"""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["check_count", "check_seconds", "check_time", "check_initial_estimate", "check_fraction"]


def check_count(what: str, value: Any) -> int:
    """A positive int (bools and floats refused, numpy ints accepted)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{what} must be >= 1, got {value!r}")
    return int(value)


def check_seconds(what: str, value: Any, *, positive: bool = False) -> float:
    """A finite, non-negative (or strictly positive) number of seconds."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number of seconds, got {type(value).__name__} {value!r}")
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0.0 or (positive and seconds == 0.0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{what} must be a finite number of seconds {bound}, got {value!r}")
    return seconds


def check_time(what: str, value: Any) -> float:
    """A finite time in seconds on the caller's clock (any sign)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a time in seconds, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be a finite time in seconds, got {value!r}")
    return float(value)


def check_initial_estimate(value: Any) -> float:
    return 0.0 if value is None else check_seconds("initial_estimate", value)


def check_fraction(what: str, value: Any, *, closed_low: bool = True) -> float:
    """A number in [0, 1) (or (0, 1) with ``closed_low=False``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number in {'[' if closed_low else '('}0, 1), got {type(value).__name__}")
    v = float(value)
    if not ((0.0 <= v if closed_low else 0.0 < v) and v < 1.0):  # NaN fails this too
        raise ValueError(f"{what} must be in {'[' if closed_low else '('}0, 1), got {value!r}")
    return v
