"""Reading and writing single configuration values."""

from __future__ import annotations

import math
import re
from typing import TypeAlias

from .errors import ConfigError, ConfigParseError

Scalar: TypeAlias = str | int | float | bool
Value: TypeAlias = Scalar | list[Scalar]

_INT = re.compile(r"[+-]?(?:0|[1-9](?:_?\d)*)")
_HEX = re.compile(r"0x[0-9A-Fa-f](?:_?[0-9A-Fa-f])*")
_FLOAT = re.compile(r"[+-]?(?:0|[1-9](?:_?\d)*)(?:\.\d(?:_?\d)*(?:[eE][+-]?\d+)?|[eE][+-]?\d+)")
_BARE_TOKEN = re.compile(r"[^\s,\]#]+")
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"'}
_REVERSE_ESCAPES = {char: f"\\{code}" for code, char in _ESCAPES.items()}


def convert_token(token: str, lineno: int = 1) -> Scalar:
    """Turn an unquoted token into a bool, int or float."""
    if token == "true":
        return True
    if token == "false":
        return False
    if _HEX.fullmatch(token):
        return int(token[2:].replace("_", ""), 16)
    if _INT.fullmatch(token):
        return int(token.replace("_", ""))
    if _FLOAT.fullmatch(token):
        return float(token.replace("_", ""))
    raise ConfigParseError(f"invalid value {token!r} (strings must be quoted)", lineno)


class _Reader:
    """Cursor over the text to the right of ``=`` on one line."""

    def __init__(self, text: str, lineno: int) -> None:
        self.text = text
        self.pos = 0
        self.lineno = lineno

    def error(self, message: str) -> ConfigParseError:
        return ConfigParseError(message, self.lineno)

    def peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def skip_spaces(self) -> None:
        while self.peek() in (" ", "\t"):
            self.pos += 1

    def read_value(self, in_array: bool = False) -> Value:
        """Read one value starting at the cursor; arrays may not contain arrays."""
        char = self.peek()
        if char == '"':
            return self.read_basic_string()
        if char == "'":
            return self.read_literal_string()
        if char == "[":
            if in_array:
                raise self.error("nested arrays are not supported")
            return self.read_array()
        match = _BARE_TOKEN.match(self.text, self.pos)
        if match is None:
            raise self.error(f"expected a value at {self.text[self.pos :]!r}")
        self.pos = match.end()
        return convert_token(match.group(), self.lineno)

    def read_basic_string(self) -> str:
        chars: list[str] = []
        self.pos += 1
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                return "".join(chars)
            if char != "\\":
                chars.append(char)
                self.pos += 1
                continue
            code = self.text[self.pos + 1 : self.pos + 2]
            if code == "u":
                digits = self.text[self.pos + 2 : self.pos + 6]
                if not _HEX4.fullmatch(digits):
                    raise self.error(f"invalid unicode escape '\\u{digits}'")
                chars.append(chr(int(digits, 16)))
                self.pos += 6
            elif code in _ESCAPES:
                chars.append(_ESCAPES[code])
                self.pos += 2
            else:
                raise self.error(f"invalid escape sequence '\\{code}'")
        raise self.error("unterminated string")

    def read_literal_string(self) -> str:
        end = self.text.find("'", self.pos + 1)
        if end == -1:
            raise self.error("unterminated string")
        value = self.text[self.pos + 1 : end]
        self.pos = end + 1
        return value

    def read_array(self) -> list[Scalar]:
        items: list[Scalar] = []
        self.pos += 1
        while True:
            self.skip_spaces()
            if not self.peek():
                raise self.error("unterminated array")
            if self.peek() == "]":
                self.pos += 1
                return items
            items.append(self.read_value(in_array=True))
            self.skip_spaces()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() and self.peek() != "]":
                raise self.error(f"expected ',' or ']' in array, found {self.text[self.pos :]!r}")


def parse_value(text: str, lineno: int = 1) -> Value:
    """Parse the value part of a ``key = value`` line, allowing a trailing ``#`` comment."""
    reader = _Reader(text, lineno)
    reader.skip_spaces()
    if not reader.peek() or reader.peek() == "#":
        raise reader.error("missing value")
    value = reader.read_value()
    reader.skip_spaces()
    rest = text[reader.pos :]
    if rest and not rest.startswith("#"):
        raise reader.error(f"unexpected text {rest!r} after value")
    return value


def _quote(text: str) -> str:
    parts = []
    for char in text:
        if char in _REVERSE_ESCAPES:
            parts.append(_REVERSE_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            parts.append(f"\\u{ord(char):04x}")
        else:
            parts.append(char)
    return '"' + "".join(parts) + '"'


def format_value(value: object, *, in_array: bool = False) -> str:
    """Render a value so that :func:`parse_value` reads it back unchanged."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"cannot write non-finite float {value!r}")
        return repr(value)
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, list | tuple):
        if in_array:
            raise ConfigError(f"cannot write nested array {value!r}")
        return "[" + ", ".join(format_value(item, in_array=True) for item in value) + "]"
    raise ConfigError(f"cannot write value of type {type(value).__name__}: {value!r}")
