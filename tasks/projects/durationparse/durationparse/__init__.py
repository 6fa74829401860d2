"""Parse, normalise and format human-readable durations."""

from .duration import Duration, canonical_unit, sum_durations
from .errors import DurationError
from .formatter import format_clock, format_compact, format_iso, format_long, normalize
from .parser import parse_clock, parse_duration, parse_human, parse_iso

__all__ = [
    "Duration",
    "DurationError",
    "canonical_unit",
    "format_clock",
    "format_compact",
    "format_iso",
    "format_long",
    "normalize",
    "parse_clock",
    "parse_duration",
    "parse_human",
    "parse_iso",
    "sum_durations",
]
