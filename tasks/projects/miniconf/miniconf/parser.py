"""Line-oriented parser that turns configuration text into a :class:`Config`."""

from __future__ import annotations

import re
from typing import Any

from .config import Config
from .errors import ConfigParseError, DuplicateKeyError
from .values import parse_value

_KEY = r"[A-Za-z0-9_-]+"
_KEY_RE = re.compile(_KEY)
_HEADER = re.compile(rf"\[\s*(?P<name>{_KEY}(?:\s*\.\s*{_KEY})*)\s*\]\s*(?:#.*)?")


def _descend(root: dict[str, Any], path: tuple[str, ...], lineno: int) -> dict[str, Any]:
    """Walk to (creating as needed) the section at ``path``."""
    node = root
    for depth, part in enumerate(path):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            dotted = ".".join(path[: depth + 1])
            raise ConfigParseError(f"{dotted!r} is a value, not a section", lineno)
        node = child
    return node


def loads(text: str) -> Config:
    """Parse configuration ``text``.

    Raises :class:`ConfigParseError` (with the 1-based line number) for malformed
    lines and :class:`DuplicateKeyError` for keys or sections defined twice.
    """
    root: dict[str, Any] = {}
    current = root
    section: tuple[str, ...] = ()
    headers: dict[tuple[str, ...], int] = {}
    keys: dict[tuple[str, ...], int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            match = _HEADER.fullmatch(line)
            if match is None:
                raise ConfigParseError(f"invalid section header {line!r}", lineno)
            section = tuple(part.strip() for part in match.group("name").split("."))
            dotted = ".".join(section)
            if section in headers:
                raise DuplicateKeyError(f"duplicate section [{dotted}]", lineno, headers[section])
            headers[section] = lineno
            current = _descend(root, section, lineno)
            continue
        name, equals, value_text = line.partition("=")
        name = name.strip()
        if not equals:
            raise ConfigParseError(f"expected 'key = value', got {line!r}", lineno)
        if not _KEY_RE.fullmatch(name):
            raise ConfigParseError(f"invalid key {name!r}", lineno)
        path = (*section, name)
        if path in keys:
            raise DuplicateKeyError(f"duplicate key {'.'.join(path)!r}", lineno, keys[path])
        if name in current:
            raise ConfigParseError(f"key {'.'.join(path)!r} is already a section", lineno)
        current[name] = parse_value(value_text, lineno)
        keys[path] = lineno
    return Config(root)
