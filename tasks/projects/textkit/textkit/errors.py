"""Exception types raised by textkit."""


class TextkitError(ValueError):
    """Base class for every error raised by textkit."""


class WidthError(TextkitError):
    """Raised when a requested line width cannot hold any text."""


class AlignmentError(TextkitError):
    """Raised when an unknown alignment mode is requested."""


class SlugError(TextkitError):
    """Raised for invalid slug options such as a bad separator."""


class TruncateError(TextkitError):
    """Raised when text cannot be truncated to the requested length."""
