"""The :class:`Duration` value type and the unit table shared by parser and formatter."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

from .errors import DurationError

MS_PER_SECOND = 1000
MS_PER_MINUTE = 60 * MS_PER_SECOND
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR
MS_PER_WEEK = 7 * MS_PER_DAY

#: Canonical unit symbols, largest first, with their size in milliseconds.
UNIT_MS: dict[str, int] = {
    "w": MS_PER_WEEK,
    "d": MS_PER_DAY,
    "h": MS_PER_HOUR,
    "m": MS_PER_MINUTE,
    "s": MS_PER_SECOND,
    "ms": 1,
}

#: Singular and plural English names for each canonical unit.
UNIT_NAMES: dict[str, tuple[str, str]] = {
    "w": ("week", "weeks"),
    "d": ("day", "days"),
    "h": ("hour", "hours"),
    "m": ("minute", "minutes"),
    "s": ("second", "seconds"),
    "ms": ("millisecond", "milliseconds"),
}

_ALIASES: dict[str, str] = {
    "wk": "w",
    "wks": "w",
    "hr": "h",
    "hrs": "h",
    "min": "m",
    "mins": "m",
    "sec": "s",
    "secs": "s",
    "msec": "ms",
    "msecs": "ms",
}


def canonical_unit(name: str) -> str:
    """Return the canonical symbol (``"h"``, ``"ms"`` ...) for a unit spelling.

    Matching is case-insensitive and accepts symbols, common abbreviations and the
    singular and plural English names.
    """
    key = name.strip().lower()
    if key in UNIT_MS:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    for symbol, (singular, plural) in UNIT_NAMES.items():
        if key in (singular, plural):
            return symbol
    raise DurationError(f"unknown duration unit {name!r}")


def to_milliseconds(amount: int | float | Decimal | str, unit: str) -> int:
    """Convert ``amount`` of ``unit`` to a whole number of milliseconds.

    Fractional results are rounded half-to-even, so ``0.0005`` seconds is 0 ms.
    """
    symbol = canonical_unit(unit)
    try:
        value = Decimal(str(amount)) * UNIT_MS[symbol]
    except InvalidOperation:
        raise DurationError(f"invalid number {amount!r}") from None
    if not value.is_finite():
        raise DurationError(f"invalid number {amount!r}")
    return int(value.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


@dataclass(frozen=True, order=True)
class Duration:
    """A signed length of time with millisecond precision."""

    milliseconds: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.milliseconds, bool) or not isinstance(self.milliseconds, int):
            raise DurationError(f"milliseconds must be an int, got {self.milliseconds!r}")

    @classmethod
    def from_parts(
        cls,
        *,
        weeks: float | Decimal = 0,
        days: float | Decimal = 0,
        hours: float | Decimal = 0,
        minutes: float | Decimal = 0,
        seconds: float | Decimal = 0,
        milliseconds: float | Decimal = 0,
    ) -> Duration:
        """Build a duration from any mix of (possibly fractional) unit amounts."""
        amounts = {"w": weeks, "d": days, "h": hours, "m": minutes, "s": seconds, "ms": milliseconds}
        total = sum(to_milliseconds(amount, unit) for unit, amount in amounts.items())
        return cls(total)

    @classmethod
    def zero(cls) -> Duration:
        """Return the empty duration."""
        return cls(0)

    @property
    def total_seconds(self) -> float:
        """The duration in seconds, as a float."""
        return self.milliseconds / MS_PER_SECOND

    @property
    def is_negative(self) -> bool:
        """True when the duration points backwards in time."""
        return self.milliseconds < 0

    def split(self, largest_unit: str = "d") -> list[tuple[str, int]]:
        """Break the absolute value into ``(unit, count)`` pairs, largest unit first.

        ``largest_unit`` caps the biggest unit used: with ``"h"`` two days become
        48 hours. Every unit from ``largest_unit`` down to ``"ms"`` is listed, zeros included.
        """
        symbol = canonical_unit(largest_unit)
        units = list(UNIT_MS)
        remaining = abs(self.milliseconds)
        result: list[tuple[str, int]] = []
        for unit in units[units.index(symbol) :]:
            count, remaining = divmod(remaining, UNIT_MS[unit])
            result.append((unit, count))
        return result

    def __bool__(self) -> bool:
        return self.milliseconds != 0

    def __neg__(self) -> Duration:
        return Duration(-self.milliseconds)

    def __pos__(self) -> Duration:
        return self

    def __abs__(self) -> Duration:
        return Duration(abs(self.milliseconds))

    def __add__(self, other: object) -> Duration:
        if not isinstance(other, Duration):
            return NotImplemented
        return Duration(self.milliseconds + other.milliseconds)

    def __sub__(self, other: object) -> Duration:
        if not isinstance(other, Duration):
            return NotImplemented
        return Duration(self.milliseconds - other.milliseconds)

    def __mul__(self, factor: object) -> Duration:
        if isinstance(factor, bool) or not isinstance(factor, int | float | Decimal):
            return NotImplemented
        return Duration(to_milliseconds(Decimal(str(factor)) * self.milliseconds, "ms"))

    __rmul__ = __mul__

    def __truediv__(self, other: object) -> Duration | float:
        """Divide by a number (giving a Duration) or by a Duration (giving a ratio)."""
        if isinstance(other, Duration):
            if other.milliseconds == 0:
                raise DurationError("cannot divide by a zero duration")
            return self.milliseconds / other.milliseconds
        if isinstance(other, bool) or not isinstance(other, int | float | Decimal):
            return NotImplemented
        if other == 0:
            raise DurationError(f"cannot divide {self!r} by zero")
        return Duration(to_milliseconds(Decimal(self.milliseconds) / Decimal(str(other)), "ms"))


def sum_durations(items: Iterable[Duration]) -> Duration:
    """Add up ``items``; an empty iterable gives the zero duration."""
    total = 0
    for item in items:
        if not isinstance(item, Duration):
            raise DurationError(f"not a Duration: {item!r}")
        total += item.milliseconds
    return Duration(total)
