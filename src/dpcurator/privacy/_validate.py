"""Validation of privacy parameters: one clear line, raised before anything changes."""

from __future__ import annotations

import math
from numbers import Real

from dpcurator.errors import InvalidParameter
from dpcurator.privacy._rigor import Written


def nonnegative(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite number >= 0, else raise."""
    x = _finite(name, value)
    if x < 0:
        raise InvalidParameter(f"{name} must be >= 0, got {value!r}")
    return x


def positive(name: str, value: object) -> float:
    """Return ``value`` as a float if it is a finite number > 0, else raise."""
    x = _finite(name, value)
    if x <= 0:
        raise InvalidParameter(f"{name} must be > 0, got {value!r}")
    return x


def probability(name: str, value: object) -> float:
    """A delta: finite, 0 <= delta < 1 (delta = 1 promises nothing)."""
    x = _finite(name, value)
    if not 0 <= x < 1:
        raise InvalidParameter(f"{name} must satisfy 0 <= {name} < 1, got {value!r}")
    return x


def open_probability(name: str, value: object) -> float:
    """A target delta for composition: 0 < delta < 1."""
    x = _finite(name, value)
    if not 0 < x < 1:
        raise InvalidParameter(f"{name} must satisfy 0 < {name} < 1, got {value!r}")
    return x


def count(name: str, value: object) -> int:
    """A number of repetitions: an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InvalidParameter(f"{name} must be an integer >= 1, got {value!r}")
    if value < 1:
        raise InvalidParameter(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidParameter(f"{name} must be a number, got {value!r}")
    x = value if isinstance(value, Written) else float(value)  # a Written keeps its decimal
    if not math.isfinite(x):
        raise InvalidParameter(f"{name} must be finite, got {value!r}")
    return x
