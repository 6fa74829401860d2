"""Exception types raised by semrange."""


class SemverError(ValueError):
    """Base class for every error raised by semrange."""


class InvalidVersionError(SemverError):
    """Raised when a version string is not a valid semantic version."""


class InvalidRangeError(SemverError):
    """Raised when a range expression cannot be parsed."""
