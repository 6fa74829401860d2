"""Exception types raised by intervalset."""


class IntervalError(ValueError):
    """Raised for an interval that cannot exist, such as one whose lower bound exceeds its upper."""


class IntervalParseError(IntervalError):
    """Raised when text cannot be read as an interval or interval set."""
