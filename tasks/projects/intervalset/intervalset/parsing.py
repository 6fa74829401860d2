"""Read intervals and interval sets from their text form, e.g. ``"[1, 5) | [7, 9]"``."""

from __future__ import annotations

import re

from .errors import IntervalError, IntervalParseError
from .interval import Interval, Number
from .intervalset import IntervalSet

_NUMBER = r"[+-]?(?:inf|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
_INTERVAL = re.compile(
    rf"\s*(?P<left>[\[(])\s*(?P<lower>{_NUMBER})\s*,\s*(?P<upper>{_NUMBER})\s*(?P<right>[\])])\s*",
    re.IGNORECASE,
)
_SEPARATOR = re.compile(r"\s*(?:\||∪)\s*")
_EMPTY_FORMS = {"", "{}", "∅"}


def parse_number(text: str) -> Number:
    """Read an int, a float or ``inf``/``-inf``; integers stay ``int``."""
    cleaned = text.strip()
    if not re.fullmatch(_NUMBER, cleaned, re.IGNORECASE):
        raise IntervalParseError(f"invalid number {text!r}")
    if cleaned.lstrip("+-").lower() == "inf":
        return float(cleaned)
    if any(marker in cleaned for marker in ".eE"):
        return float(cleaned)
    return int(cleaned)


def parse_interval(text: str) -> Interval:
    """Parse ``"[a, b]"``, ``"(a, b)"``, ``"[a, b)"`` or ``"(a, b]"``."""
    match = _INTERVAL.fullmatch(text)
    if match is None:
        raise IntervalParseError(f"invalid interval {text!r}")
    lower = parse_number(match.group("lower"))
    upper = parse_number(match.group("upper"))
    try:
        return Interval(lower, upper, match.group("left") == "[", match.group("right") == "]")
    except IntervalError as exc:
        raise IntervalParseError(f"invalid interval {text!r}: {exc}") from None


def parse_set(text: str) -> IntervalSet:
    """Parse intervals joined by ``|`` (or ``∪``); ``"{}"``, ``"∅"`` and ``""`` are the empty set."""
    stripped = text.strip()
    if stripped in _EMPTY_FORMS:
        return IntervalSet()
    parts = _SEPARATOR.split(stripped)
    if any(not part for part in parts):
        raise IntervalParseError(f"empty member in interval set {text!r}")
    return IntervalSet(parse_interval(part) for part in parts)
