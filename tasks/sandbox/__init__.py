"""Sandboxes by name: `make_sandbox("local")` or `make_sandbox("docker", ...)`.

Each implementation lives in its own module and is imported only when asked for, so using the
local sandbox never needs the docker client and vice versa.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

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
        raise ValueError(f"unknown sandbox {name!r}; choose one of: {', '.join(sorted(SANDBOXES))}") from None
    module = import_module(module_name)
    cls = getattr(module, class_name, None)
    if cls is None:  # tolerate another class name: the class whose `name` is the sandbox's name
        found = [v for v in vars(module).values() if isinstance(v, type) and getattr(v, "name", None) == name]
        if len(found) != 1:
            raise SandboxError(f"{module_name} defines no {class_name} (nor one class with name = {name!r})")
        cls = found[0]
    return cls(**options)


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
