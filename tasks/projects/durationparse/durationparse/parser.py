"""Turn duration text into :class:`Duration` values.

Three notations are understood:

* human: ``"1h30m"``, ``"1.5h"``, ``"2 days, 3 hours and 5 minutes"``, ``"90"`` (seconds);
* ISO-8601 (weeks, days and time only): ``"PT1H30M"``, ``"P2DT3H"``, ``"-P1W"``;
* clock: ``"1:30:00"`` (hours:minutes:seconds) or ``"4:05"`` (minutes:seconds).
"""

from __future__ import annotations

import re

from .duration import Duration, canonical_unit, to_milliseconds
from .errors import DurationError

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"

_HUMAN_TOKEN = re.compile(
    rf"\s*(?P<sep>(?:,|\band\b)\s*)?(?P<num>{_NUMBER})\s*(?P<unit>[a-z]+)\s*",
    re.IGNORECASE,
)
_BARE_NUMBER = re.compile(rf"{_NUMBER}")

_ISO_VALUE = r"\d+(?:[.,]\d+)?"
_ISO = re.compile(
    rf"""
    P
    (?:(?P<w>{_ISO_VALUE})W)?
    (?:(?P<d>{_ISO_VALUE})D)?
    (?P<time>T
        (?:(?P<h>{_ISO_VALUE})H)?
        (?:(?P<m>{_ISO_VALUE})M)?
        (?:(?P<s>{_ISO_VALUE})S)?
    )?
    """,
    re.VERBOSE | re.IGNORECASE,
)

_CLOCK = re.compile(r"(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d{2})(?:\.(?P<frac>\d{1,3}))?")


def _split_sign(text: str) -> tuple[int, str]:
    if text[:1] == "-":
        return -1, text[1:].lstrip()
    if text[:1] == "+":
        return 1, text[1:].lstrip()
    return 1, text


def parse_iso(text: str) -> Duration:
    """Parse the ISO-8601 duration subset ``[-]P[nW][nD][T[nH][nM][nS]]``.

    Years and months are rejected because their length is not fixed.
    """
    sign, body = _split_sign(text.strip())
    date_part = body.upper().split("T", 1)[0]
    if "Y" in date_part or "M" in date_part:
        raise DurationError(f"years and months are not supported in {text!r}")
    match = _ISO.fullmatch(body)
    if match is None:
        raise DurationError(f"invalid ISO-8601 duration {text!r}")
    values = {unit: match.group(unit) for unit in ("w", "d", "h", "m", "s")}
    if all(value is None for value in values.values()):
        raise DurationError(f"ISO-8601 duration {text!r} has no components")
    if match.group("time") is not None and all(values[unit] is None for unit in ("h", "m", "s")):
        raise DurationError(f"ISO-8601 duration {text!r} has a 'T' without time components")
    total = 0
    for unit, value in values.items():
        if value is not None:
            total += to_milliseconds(value.replace(",", "."), unit)
    return Duration(sign * total)


def parse_clock(text: str) -> Duration:
    """Parse ``h:mm:ss`` or ``m:ss``, optionally followed by ``.fff`` milliseconds."""
    sign, body = _split_sign(text.strip())
    match = _CLOCK.fullmatch(body)
    if match is None:
        raise DurationError(f"invalid clock duration {text!r}")
    hours = int(match.group("h") or 0)
    minutes = int(match.group("m"))
    seconds = int(match.group("s"))
    if match.group("h") is not None and minutes >= 60:
        raise DurationError(f"minutes out of range in {text!r}")
    if seconds >= 60:
        raise DurationError(f"seconds out of range in {text!r}")
    millis = int((match.group("frac") or "").ljust(3, "0"))
    total = ((hours * 60 + minutes) * 60 + seconds) * 1000 + millis
    return Duration(sign * total)


def parse_human(text: str) -> Duration:
    """Parse unit-tagged amounts such as ``"1h 30m"`` or ``"2 days and 4 hours"``.

    Amounts may be separated by spaces, commas or the word ``and``; each unit may
    appear only once. A lone number is taken as seconds.
    """
    sign, body = _split_sign(text.strip())
    if _BARE_NUMBER.fullmatch(body):
        return Duration(sign * to_milliseconds(body, "s"))
    seen: set[str] = set()
    total = 0
    position = 0
    while position < len(body):
        match = _HUMAN_TOKEN.match(body, position)
        if match is None:
            raise DurationError(f"unexpected text {body[position:]!r} in duration {text!r}")
        if position == 0 and match.group("sep"):
            raise DurationError(f"duration {text!r} starts with a separator")
        unit = canonical_unit(match.group("unit"))
        if unit in seen:
            raise DurationError(f"unit {unit!r} given more than once in {text!r}")
        seen.add(unit)
        total += to_milliseconds(match.group("num"), unit)
        position = match.end()
    if not seen:
        raise DurationError(f"no amounts found in duration {text!r}")
    return Duration(sign * total)


def parse_duration(text: str) -> Duration:
    """Parse ``text`` in any supported notation and return a :class:`Duration`."""
    if not isinstance(text, str):
        raise DurationError(f"expected a string, got {text!r}")
    stripped = text.strip()
    if not stripped:
        raise DurationError(f"empty duration {text!r}")
    _, body = _split_sign(stripped)
    if body[:1] in ("P", "p"):
        return parse_iso(stripped)
    if ":" in body:
        return parse_clock(stripped)
    return parse_human(stripped)
