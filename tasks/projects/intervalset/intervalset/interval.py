"""A single interval of real numbers with independently open or closed ends."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import IntervalError

Number = int | float


def _check_number(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise IntervalError(f"{name} bound must be a number, got {value!r}")
    if isinstance(value, float) and math.isnan(value):
        raise IntervalError(f"{name} bound must not be NaN")


@dataclass(frozen=True)
class Interval:
    """The set of numbers between ``lower`` and ``upper``.

    Each end is included when the matching ``*_closed`` flag is true. Empty intervals
    cannot be built; operations that may produce nothing return ``None`` instead.
    """

    lower: Number
    upper: Number
    lower_closed: bool = True
    upper_closed: bool = True

    def __post_init__(self) -> None:
        _check_number(self.lower, "lower")
        _check_number(self.upper, "upper")
        if self.lower > self.upper:
            raise IntervalError(f"lower bound {self.lower!r} is greater than upper bound {self.upper!r}")
        if self.lower_closed and math.isinf(self.lower):
            raise IntervalError(f"infinite lower bound of {self} must be open")
        if self.upper_closed and math.isinf(self.upper):
            raise IntervalError(f"infinite upper bound of {self} must be open")
        if self.lower == self.upper and not (self.lower_closed and self.upper_closed):
            raise IntervalError(f"interval {self} is empty")

    @property
    def length(self) -> Number:
        """Distance between the bounds (``inf`` for unbounded intervals)."""
        return self.upper - self.lower

    @property
    def is_point(self) -> bool:
        """True for a degenerate interval ``[x, x]``."""
        return self.lower == self.upper

    def contains(self, value: Number) -> bool:
        """True when ``value`` lies inside the interval."""
        if value < self.lower or value > self.upper:
            return False
        if value == self.lower and not self.lower_closed:
            return False
        return not (value == self.upper and not self.upper_closed)

    def __contains__(self, value: object) -> bool:
        if isinstance(value, Interval):
            return value.issubset(self)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return self.contains(value)

    def issubset(self, other: Interval) -> bool:
        """True when every point of ``self`` is also in ``other``."""
        return self.intersection(other) == self

    def intersection(self, other: Interval) -> Interval | None:
        """Common part of two intervals, or ``None`` when they do not meet."""
        if self.lower > other.lower:
            lower, lower_closed = self.lower, self.lower_closed
        elif self.lower < other.lower:
            lower, lower_closed = other.lower, other.lower_closed
        else:
            lower, lower_closed = self.lower, self.lower_closed and other.lower_closed
        if self.upper < other.upper:
            upper, upper_closed = self.upper, self.upper_closed
        elif self.upper > other.upper:
            upper, upper_closed = other.upper, other.upper_closed
        else:
            upper, upper_closed = self.upper, self.upper_closed and other.upper_closed
        return make_interval(lower, upper, lower_closed, upper_closed)

    def overlaps(self, other: Interval) -> bool:
        """True when the intervals share at least one point."""
        return self.intersection(other) is not None

    def is_adjacent(self, other: Interval) -> bool:
        """True when the intervals are disjoint but their union has no gap, like ``[1, 2)`` and ``[2, 3]``."""
        if self.upper == other.lower:
            return self.upper_closed != other.lower_closed
        if other.upper == self.lower:
            return other.upper_closed != self.lower_closed
        return False

    def hull(self, other: Interval) -> Interval:
        """Smallest interval containing both ``self`` and ``other``."""
        if self.lower < other.lower:
            lower, lower_closed = self.lower, self.lower_closed
        elif self.lower > other.lower:
            lower, lower_closed = other.lower, other.lower_closed
        else:
            lower, lower_closed = self.lower, self.lower_closed or other.lower_closed
        if self.upper > other.upper:
            upper, upper_closed = self.upper, self.upper_closed
        elif self.upper < other.upper:
            upper, upper_closed = other.upper, other.upper_closed
        else:
            upper, upper_closed = self.upper, self.upper_closed or other.upper_closed
        return Interval(lower, upper, lower_closed, upper_closed)

    def subtract(self, other: Interval) -> list[Interval]:
        """Parts of ``self`` not covered by ``other`` (zero, one or two intervals)."""
        if not self.overlaps(other):
            return [self]
        pieces = [
            make_interval(self.lower, other.lower, self.lower_closed, not other.lower_closed),
            make_interval(other.upper, self.upper, not other.upper_closed, self.upper_closed),
        ]
        return [piece for piece in pieces if piece is not None]

    def __str__(self) -> str:
        left = "[" if self.lower_closed else "("
        right = "]" if self.upper_closed else ")"
        # repr() writes inf as "inf" and keeps ints and floats apart, which is what the parser reads
        return f"{left}{self.lower!r}, {self.upper!r}{right}"


def make_interval(lower: Number, upper: Number, lower_closed: bool, upper_closed: bool) -> Interval | None:
    """Build an interval, returning ``None`` instead of raising when it would be empty."""
    if lower > upper:
        return None
    if lower == upper and not (lower_closed and upper_closed):
        return None
    return Interval(lower, upper, lower_closed and not math.isinf(lower), upper_closed and not math.isinf(upper))


def closed(lower: Number, upper: Number) -> Interval:
    """``[lower, upper]``"""
    return Interval(lower, upper, True, True)


def open_interval(lower: Number, upper: Number) -> Interval:
    """``(lower, upper)``"""
    return Interval(lower, upper, False, False)


def closed_open(lower: Number, upper: Number) -> Interval:
    """``[lower, upper)``"""
    return Interval(lower, upper, True, False)


def open_closed(lower: Number, upper: Number) -> Interval:
    """``(lower, upper]``"""
    return Interval(lower, upper, False, True)


def point(value: Number) -> Interval:
    """``[value, value]``"""
    return Interval(value, value, True, True)
