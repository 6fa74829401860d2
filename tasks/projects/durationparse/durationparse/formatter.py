"""Render :class:`Duration` values as text in several styles."""

from __future__ import annotations

from .duration import MS_PER_HOUR, MS_PER_MINUTE, MS_PER_SECOND, UNIT_NAMES, Duration
from .errors import DurationError
from .parser import parse_duration


def _nonzero_parts(duration: Duration, largest_unit: str, max_units: int | None) -> list[tuple[str, int]]:
    if max_units is not None and max_units < 1:
        raise DurationError(f"max_units must be at least 1, got {max_units!r}")
    parts = [(unit, count) for unit, count in duration.split(largest_unit) if count]
    if max_units is not None:
        parts = parts[:max_units]
    return parts


def format_compact(duration: Duration, *, largest_unit: str = "d", max_units: int | None = None) -> str:
    """Format as ``"1d2h30m"``; zero is ``"0s"``.

    ``max_units`` keeps only the most significant non-zero units (the rest is
    truncated, not rounded).
    """
    parts = _nonzero_parts(duration, largest_unit, max_units)
    if not parts:
        return "0s"
    sign = "-" if duration.is_negative else ""
    return sign + "".join(f"{count}{unit}" for unit, count in parts)


def _join_words(words: list[str], conjunction: str | None) -> str:
    if conjunction is None or len(words) < 2:
        return ", ".join(words)
    return ", ".join(words[:-1]) + f" {conjunction} " + words[-1]


def format_long(
    duration: Duration,
    *,
    largest_unit: str = "d",
    max_units: int | None = None,
    conjunction: str | None = "and",
) -> str:
    """Format as ``"2 days, 3 hours and 1 minute"``; zero is ``"0 seconds"``.

    With ``conjunction=None`` every part is joined by a comma.
    """
    parts = _nonzero_parts(duration, largest_unit, max_units)
    if not parts:
        return "0 seconds"
    words = []
    for unit, count in parts:
        singular, plural = UNIT_NAMES[unit]
        words.append(f"{count} {singular if count == 1 else plural}")
    sign = "-" if duration.is_negative else ""
    return sign + _join_words(words, conjunction)


def _seconds_text(millis: int) -> str:
    whole, fraction = divmod(millis, MS_PER_SECOND)
    if fraction == 0:
        return str(whole)
    return f"{whole}.{fraction:03d}".rstrip("0")


def format_iso(duration: Duration) -> str:
    """Format as an ISO-8601 duration such as ``"P1DT2H3M4.5S"``; zero is ``"PT0S"``."""
    if not duration:
        return "PT0S"
    counts = dict(duration.split("d"))
    date = f"{counts['d']}D" if counts["d"] else ""
    time = ""
    if counts["h"]:
        time += f"{counts['h']}H"
    if counts["m"]:
        time += f"{counts['m']}M"
    millis = counts["s"] * MS_PER_SECOND + counts["ms"]
    if millis:
        time += f"{_seconds_text(millis)}S"
    sign = "-" if duration.is_negative else ""
    return f"{sign}P{date}" + (f"T{time}" if time else "")


def format_clock(duration: Duration) -> str:
    """Format as ``"HH:MM:SS"`` (hours may exceed 24), adding ``".fff"`` when needed."""
    remaining = abs(duration.milliseconds)
    hours, remaining = divmod(remaining, MS_PER_HOUR)
    minutes, remaining = divmod(remaining, MS_PER_MINUTE)
    seconds, millis = divmod(remaining, MS_PER_SECOND)
    text = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    if millis:
        text += f".{millis:03d}"
    return ("-" if duration.is_negative else "") + text


_STYLES = {
    "compact": format_compact,
    "long": format_long,
    "iso": format_iso,
    "clock": format_clock,
}


def normalize(text: str, style: str = "compact") -> str:
    """Parse ``text`` and format it again in ``style`` (compact, long, iso or clock)."""
    try:
        formatter = _STYLES[style]
    except KeyError:
        raise DurationError(f"unknown format style {style!r}") from None
    return formatter(parse_duration(text))
