"""The :class:`Config` tree returned by the parser, with typed getters."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import ConfigError, ConfigTypeError, MissingKeyError
from .values import Scalar, Value

_MISSING: Any = object()

_DESCRIPTIONS = {bool: "a bool", int: "an int", float: "a float", str: "a str", list: "a list", dict: "a section"}


def _describe(value: object) -> str:
    """``"an int"``, ``"a section"`` ...: the kind of ``value`` for error messages."""
    return _DESCRIPTIONS.get(type(value), f"a {type(value).__name__}")


class Config:
    """A nested mapping of sections (dicts) and values, addressed with dotted paths like ``"server.port"``."""

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = copy.deepcopy(dict(data or {}))

    def _lookup(self, path: str) -> Any:
        node: Any = self._data
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                raise MissingKeyError(f"no such key {path!r}")
            node = node[part]
        return node

    def __contains__(self, path: object) -> bool:
        if not isinstance(path, str):
            return False
        try:
            self._lookup(path)
        except MissingKeyError:
            return False
        return True

    def __getitem__(self, path: str) -> Value | Config:
        return self.get(path)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return self._data == other._data

    def __repr__(self) -> str:
        return f"Config({self._data!r})"

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def get(self, path: str, default: Any = _MISSING) -> Any:
        """The value or section at ``path``; ``default`` (if given) when it is absent."""
        try:
            found = self._lookup(path)
        except MissingKeyError:
            if default is _MISSING:
                raise
            return default
        return Config(found) if isinstance(found, dict) else copy.copy(found)

    def _typed(self, path: str, default: Any, expected: tuple[type, ...], name: str) -> tuple[Any, bool]:
        """Return ``(value, found)``, checking the type of a found value."""
        try:
            value = self._lookup(path)
        except MissingKeyError:
            if default is _MISSING:
                raise
            return default, False
        if isinstance(value, bool) and bool not in expected:
            raise ConfigTypeError(f"{path!r} is a bool, expected {name}")
        if not isinstance(value, expected):
            raise ConfigTypeError(f"{path!r} is {_describe(value)}, expected {name}")
        return value, True

    def get_str(self, path: str, default: Any = _MISSING) -> str:
        """The string at ``path``."""
        return self._typed(path, default, (str,), "str")[0]

    def get_int(self, path: str, default: Any = _MISSING) -> int:
        """The integer at ``path`` (booleans are not integers here)."""
        return self._typed(path, default, (int,), "int")[0]

    def get_float(self, path: str, default: Any = _MISSING) -> float:
        """The number at ``path`` as a float; integers are widened."""
        value, found = self._typed(path, default, (int, float), "float")
        return float(value) if found else value

    def get_bool(self, path: str, default: Any = _MISSING) -> bool:
        """The boolean at ``path``."""
        return self._typed(path, default, (bool,), "bool")[0]

    def get_list(self, path: str, default: Any = _MISSING, item_type: type | None = None) -> list[Scalar]:
        """A copy of the array at ``path``; with ``item_type`` every element must be of that type."""
        value, found = self._typed(path, default, (list,), "list")
        if not found:
            return value
        if item_type is not None:
            for index, item in enumerate(value):
                if not isinstance(item, item_type) or (isinstance(item, bool) and item_type is not bool):
                    raise ConfigTypeError(f"{path!r}[{index}] is {_describe(item)}, expected {item_type.__name__}")
        return list(value)

    def section(self, path: str) -> Config:
        """The section at ``path`` as its own Config."""
        found = self.get(path)
        if not isinstance(found, Config):
            raise ConfigTypeError(f"{path!r} is {_describe(found)}, not a section")
        return found

    def sections(self) -> list[str]:
        """Names of the sections directly below this level, in definition order."""
        return [key for key, value in self._data.items() if isinstance(value, dict)]

    def keys(self) -> list[str]:
        """Names of the plain values at this level, in definition order."""
        return [key for key, value in self._data.items() if not isinstance(value, dict)]

    def to_dict(self) -> dict[str, Any]:
        """A deep copy of the underlying nested dictionaries."""
        return copy.deepcopy(self._data)

    def merged(self, other: Config) -> Config:
        """A new Config with ``other`` laid over this one, section by section."""

        def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
            result = dict(base)
            for key, value in extra.items():
                current = result.get(key, _MISSING)
                if current is _MISSING:
                    result[key] = value
                elif isinstance(current, dict) and isinstance(value, dict):
                    result[key] = merge(current, value)
                elif isinstance(current, dict) or isinstance(value, dict):
                    raise ConfigError(f"cannot merge a section and a value at {key!r}")
                else:
                    result[key] = value
            return result

        return Config(merge(self._data, other._data))
