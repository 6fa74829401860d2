"""Write a :class:`Config` (or plain nested dicts) back to configuration text."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .config import Config
from .errors import ConfigError
from .values import format_value

_KEY_RE = re.compile(r"[A-Za-z0-9_-]+")


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ConfigError(f"cannot write key {key!r}: keys must be letters, digits, '_' or '-'")
    return key


def _write_section(lines: list[str], path: tuple[str, ...], data: Mapping[str, Any]) -> None:
    values = [(key, value) for key, value in data.items() if not isinstance(value, Mapping)]
    children = [(key, value) for key, value in data.items() if isinstance(value, Mapping)]
    if path and (values or not children):
        if lines:
            lines.append("")
        lines.append(f"[{'.'.join(path)}]")
    for key, value in values:
        lines.append(f"{_check_key(key)} = {format_value(value)}")
    for key, child in children:
        _write_section(lines, (*path, _check_key(key)), child)


def dumps(config: Config | Mapping[str, Any]) -> str:
    """Render ``config`` so that :func:`loads` gives back an equal Config.

    Top-level values come first, then each section under a dotted header. Sections
    holding only sub-sections get no header of their own.
    """
    data = config.to_dict() if isinstance(config, Config) else config
    lines: list[str] = []
    _write_section(lines, (), data)
    return "\n".join(lines) + "\n" if lines else ""
