"""Sandboxes by name: `make_sandbox("local")` or `make_sandbox("docker", ...)`.

Each implementation lives in its own module and is imported only when asked for, so using the
local sandbox never needs the docker client and vice versa.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from common.errors import ConfigError
from tasks.sandbox.base import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT_S, WORKSPACE, CommandResult, Sandbox, SandboxError

# name -> (module, class); the module is imported on first use
SANDBOXES: dict[str, tuple[str, str]] = {
    "local": ("tasks.sandbox.local", "LocalSandbox"),
    "docker": ("tasks.sandbox.docker", "DockerSandbox"),
}


def make_sandbox(name: str, **options: Any) -> Sandbox:
    """A new, not yet started sandbox of the named kind; `options` go to its constructor."""
    try:
        module_name, class_name = SANDBOXES[name]
    except KeyError:
        raise ConfigError(f"unknown sandbox {name!r}; choose one of: {', '.join(sorted(SANDBOXES))}") from None
    cls = getattr(import_module(module_name), class_name)
    allowed = _option_names(cls)
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ConfigError(f"unknown {name} sandbox option(s) {unknown}; allowed: {', '.join(sorted(allowed))}")
    return cls(**options)


def _option_names(cls: type) -> set[str]:
    """Keyword options a sandbox class takes (its own and, for the local sandbox, every `Limits` field)."""
    import dataclasses
    import inspect

    from tasks.sandbox.limits import Limits

    params = inspect.signature(cls).parameters
    names = {n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        names |= {f.name for f in dataclasses.fields(Limits)}
    return names


__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "DEFAULT_TIMEOUT_S",
    "SANDBOXES",
    "WORKSPACE",
    "CommandResult",
    "Sandbox",
    "SandboxError",
    "make_sandbox",
]
