"""Parse and write configuration files in a small INI/TOML subset."""

from .config import Config
from .dump import dumps
from .errors import ConfigError, ConfigParseError, ConfigTypeError, DuplicateKeyError, MissingKeyError
from .parser import loads
from .values import format_value, parse_value

__all__ = [
    "Config",
    "ConfigError",
    "ConfigParseError",
    "ConfigTypeError",
    "DuplicateKeyError",
    "MissingKeyError",
    "dumps",
    "format_value",
    "loads",
    "parse_value",
]
