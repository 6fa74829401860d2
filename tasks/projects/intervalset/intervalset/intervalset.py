"""Immutable sets of disjoint intervals kept in normal form."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator

from .errors import IntervalError
from .interval import Interval, Number


def _can_merge(left: Interval, right: Interval) -> bool:
    """True when ``right`` (which starts no earlier than ``left``) overlaps or touches ``left``."""
    if right.lower < left.upper:
        return True
    if right.lower == left.upper:
        return left.upper_closed or right.lower_closed
    return False


def _normalize(intervals: Iterable[Interval]) -> list[Interval]:
    # Intervals sharing a lower bound always overlap, so ordering by it alone is enough.
    ordered = sorted(intervals, key=lambda interval: interval.lower)
    merged: list[Interval] = []
    for interval in ordered:
        if merged and _can_merge(merged[-1], interval):
            merged[-1] = merged[-1].hull(interval)
        else:
            merged.append(interval)
    return merged


class IntervalSet:
    """A union of intervals stored as a sorted tuple of disjoint, non-touching pieces."""

    __slots__ = ("_intervals", "_lowers")

    def __init__(self, intervals: Iterable[Interval] = ()) -> None:
        items = list(intervals)
        for item in items:
            if not isinstance(item, Interval):
                raise IntervalError(f"IntervalSet members must be Interval, got {item!r}")
        self._intervals: tuple[Interval, ...] = tuple(_normalize(items))
        self._lowers: list[Number] = [interval.lower for interval in self._intervals]

    @classmethod
    def everything(cls) -> IntervalSet:
        """The whole real line ``(-inf, inf)``."""
        return cls([Interval(float("-inf"), float("inf"), False, False)])

    @property
    def intervals(self) -> tuple[Interval, ...]:
        """The normalised member intervals in ascending order."""
        return self._intervals

    def __iter__(self) -> Iterator[Interval]:
        return iter(self._intervals)

    def __len__(self) -> int:
        return len(self._intervals)

    def __bool__(self) -> bool:
        return bool(self._intervals)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return self._intervals == other._intervals

    def __hash__(self) -> int:
        return hash(self._intervals)

    def __repr__(self) -> str:
        return f"IntervalSet({list(self._intervals)!r})"

    def __str__(self) -> str:
        if not self._intervals:
            return "{}"
        return " | ".join(str(interval) for interval in self._intervals)

    def contains(self, value: Number) -> bool:
        """True when ``value`` lies in one of the member intervals."""
        index = bisect_right(self._lowers, value) - 1
        return index >= 0 and self._intervals[index].contains(value)

    def contains_interval(self, interval: Interval) -> bool:
        """True when the whole of ``interval`` is inside a single member."""
        return any(interval.issubset(member) for member in self._intervals)

    def __contains__(self, value: object) -> bool:
        if isinstance(value, Interval):
            return self.contains_interval(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return self.contains(value)

    def add(self, interval: Interval) -> IntervalSet:
        """A new set that also covers ``interval``."""
        return IntervalSet([*self._intervals, interval])

    def union(self, other: IntervalSet) -> IntervalSet:
        """Points in either set."""
        return IntervalSet([*self._intervals, *other._intervals])

    def intersection(self, other: IntervalSet) -> IntervalSet:
        """Points in both sets, found with a single sweep over the two sorted lists."""
        result: list[Interval] = []
        i = j = 0
        mine, theirs = self._intervals, other._intervals
        while i < len(mine) and j < len(theirs):
            common = mine[i].intersection(theirs[j])
            if common is not None:
                result.append(common)
            if (mine[i].upper, mine[i].upper_closed) < (theirs[j].upper, theirs[j].upper_closed):
                i += 1
            else:
                j += 1
        return IntervalSet(result)

    def difference(self, other: IntervalSet) -> IntervalSet:
        """Points in ``self`` that are not in ``other``."""
        result: list[Interval] = []
        for interval in self._intervals:
            pieces = [interval]
            for hole in other._intervals:
                pieces = [part for piece in pieces for part in piece.subtract(hole)]
            result.extend(pieces)
        return IntervalSet(result)

    def symmetric_difference(self, other: IntervalSet) -> IntervalSet:
        """Points in exactly one of the two sets."""
        return self.difference(other).union(other.difference(self))

    def complement(self) -> IntervalSet:
        """Everything on the real line that is not in the set."""
        return IntervalSet.everything().difference(self)

    def issubset(self, other: IntervalSet) -> bool:
        """True when every point of ``self`` is in ``other``."""
        return all(other.contains_interval(interval) for interval in self._intervals)

    def bounds(self) -> Interval | None:
        """Smallest single interval covering the set, or ``None`` when it is empty."""
        if not self._intervals:
            return None
        first, last = self._intervals[0], self._intervals[-1]
        return Interval(first.lower, last.upper, first.lower_closed, last.upper_closed)

    def gaps(self) -> IntervalSet:
        """The holes between consecutive members (not the unbounded outside parts)."""
        pairs = zip(self._intervals, self._intervals[1:], strict=False)
        return IntervalSet(
            Interval(left.upper, right.lower, not left.upper_closed, not right.lower_closed) for left, right in pairs
        )

    def total_length(self) -> Number:
        """Sum of the member lengths; points contribute zero."""
        return sum(interval.length for interval in self._intervals)

    def __or__(self, other: IntervalSet) -> IntervalSet:
        return self.union(other)

    def __and__(self, other: IntervalSet) -> IntervalSet:
        return self.intersection(other)

    def __sub__(self, other: IntervalSet) -> IntervalSet:
        return self.difference(other)

    def __xor__(self, other: IntervalSet) -> IntervalSet:
        return self.symmetric_difference(other)

    def __invert__(self) -> IntervalSet:
        return self.complement()

    def __le__(self, other: IntervalSet) -> bool:
        return self.issubset(other)
