"""Clock helpers.

A clock is any zero-argument callable returning the current time in seconds as
a float, such as ``time.monotonic``.  :class:`ManualClock` is a clock that only
moves when told to, which makes expiry easy to reason about.
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import ClockError

Clock = Callable[[], float]


class ManualClock:
    """A clock whose time is advanced explicitly."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        """The current reading of the clock."""
        return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` and return the new time."""
        if seconds < 0:
            raise ClockError(f"cannot advance the clock by a negative amount: {seconds}")
        self._now += seconds
        return self._now

    def set(self, when: float) -> None:
        """Jump to the absolute time ``when``, which must not be in the past."""
        if when < self._now:
            raise ClockError(f"cannot set the clock back from {self._now} to {when}")
        self._now = float(when)

    def __repr__(self) -> str:
        return f"ManualClock(now={self._now})"
