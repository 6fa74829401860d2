"""Exception types raised by miniconf."""

from __future__ import annotations


class ConfigError(ValueError):
    """Base class for every error raised by miniconf."""


class ConfigParseError(ConfigError):
    """Raised for text that is not valid configuration; ``lineno`` is 1-based."""

    def __init__(self, message: str, lineno: int) -> None:
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno


class DuplicateKeyError(ConfigParseError):
    """Raised when a key or section is defined twice; ``first_lineno`` is the earlier definition."""

    def __init__(self, message: str, lineno: int, first_lineno: int) -> None:
        super().__init__(f"{message} (first defined on line {first_lineno})", lineno)
        self.first_lineno = first_lineno


class MissingKeyError(ConfigError):
    """Raised by getters when a key is absent and no default was given."""


class ConfigTypeError(ConfigError):
    """Raised by typed getters when a value has the wrong type."""
