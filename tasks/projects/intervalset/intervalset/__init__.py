"""Numeric intervals and normalised sets of disjoint intervals."""

from .errors import IntervalError, IntervalParseError
from .interval import Interval, closed, closed_open, make_interval, open_closed, open_interval, point
from .intervalset import IntervalSet
from .parsing import parse_interval, parse_number, parse_set

__all__ = [
    "Interval",
    "IntervalError",
    "IntervalParseError",
    "IntervalSet",
    "closed",
    "closed_open",
    "make_interval",
    "open_closed",
    "open_interval",
    "parse_interval",
    "parse_number",
    "parse_set",
    "point",
]
