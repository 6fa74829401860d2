"""semrange: semantic versions and npm-style version ranges."""

from .errors import InvalidRangeError, InvalidVersionError, SemverError
from .ranges import Comparator, Range, max_satisfying, min_satisfying, satisfies
from .version import Version, coerce_version, compare, compare_prerelease, parse_prerelease, sort_versions

__all__ = [
    "Comparator",
    "InvalidRangeError",
    "InvalidVersionError",
    "Range",
    "SemverError",
    "Version",
    "coerce_version",
    "compare",
    "compare_prerelease",
    "max_satisfying",
    "min_satisfying",
    "parse_prerelease",
    "satisfies",
    "sort_versions",
]
