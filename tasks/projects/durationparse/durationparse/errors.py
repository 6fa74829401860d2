"""Exception types raised by durationparse."""


class DurationError(ValueError):
    """Raised when a duration cannot be parsed, built or formatted."""
