"""Typed option dataclasses for drafters and acceptance rules, filled from `KEY=VALUE` pairs.

Each component declares its knobs as a dataclass; this module routes user-supplied keys to the
component that declares them and converts strings to the declared type. Unknown keys are errors.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar, get_type_hints

from common.errors import ConfigError

T = TypeVar("T")


def parse_option_pairs(pairs: list[str]) -> dict[str, str]:
    """Turn ["k=4", "tau=0.5"] into {"k": "4", "tau": "0.5"}; a pair without '=' is an error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"option {pair!r} is not of the form KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def option_names(cls: type) -> list[str]:
    """The option keys a dataclass declares."""
    return [f.name for f in dataclasses.fields(cls)]


def _convert(raw: Any, kind: Any, key: str) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        if kind is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind in (int, float, str):
            return kind(raw)
    except ValueError:
        raise ConfigError(f"option {key}={raw!r}: expected a value of type {kind.__name__}") from None
    return raw


def build_options(cls: type[T], values: dict[str, Any], owner: str) -> T:
    """Instantiate `cls` from `values` (strings converted to the field types); unknown keys fail."""
    allowed = option_names(cls)
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ConfigError(f"unknown option(s) {unknown} for {owner}; allowed: {allowed or 'none'}")
    hints = get_type_hints(cls)
    kwargs = {k: _convert(v, hints[k], k) for k, v in values.items()}
    return cls(**kwargs)


def split_options(values: dict[str, Any], owners: dict[str, type]) -> dict[str, dict[str, Any]]:
    """Route each key to the owner whose dataclass declares it; a key nobody declares is an error."""
    routed: dict[str, dict[str, Any]] = {name: {} for name in owners}
    for key, value in values.items():
        takers = [name for name, cls in owners.items() if key in option_names(cls)]
        if not takers:
            allowed = {name: option_names(cls) for name, cls in owners.items()}
            raise ConfigError(f"unknown option {key!r}; allowed options: {allowed}")
        for name in takers:
            routed[name][key] = value
    return routed
