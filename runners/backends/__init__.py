"""What decodes one side of a comparison: the backends by their `engine.backend` name.

A backend turns one `EngineConfig` into agent models, one per task: `builtin` is spectune's engine
(builtin.py), `llama-server` a real llama-server running the configuration's exported flags
(llama_server.py). Callers look a class up here and read its hooks (base.py) instead of comparing names.
"""

from __future__ import annotations

from typing import Any

from common.errors import ConfigError
from engine.engine import EngineConfig
from runners.backends.base import Backend
from runners.backends.builtin import EngineBackend
from runners.backends.llama_server import ServerBackend
from runners.backends.llama_server_setup import ServerSettings, context_of

# engine.backend -> its class; the only list of backend names (runners.config checks engine.backend here).
BACKENDS: dict[str, type[Backend]] = {cls.name: cls for cls in (EngineBackend, ServerBackend)}

__all__ = [
    "BACKENDS",
    "Backend",
    "EngineBackend",
    "ServerBackend",
    "ServerSettings",
    "backend_class",
    "context_of",
    "make_backend",
]


def backend_class(name: str) -> type[Backend]:
    """The backend class `engine.backend=name` selects; ValueError naming the allowed ones."""
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"engine.backend={name!r} is not allowed; choose one of: {', '.join(BACKENDS)}") from None


def make_backend(config: EngineConfig, models: Any, settings: Any | None = None, concurrency: int = 1) -> Backend:
    """The backend `config.backend` names, on the loaded `models` (runners.models.Models) and its own `settings`
    (Backend.settings_from), for `concurrency` agents.

    UnsupportedConfig when it cannot run the configuration (the caller reports the candidate as unsupported).
    """
    if concurrency < 1:
        raise ConfigError(f"run.concurrency must be >= 1, got {concurrency}")
    return backend_class(config.backend).create(config, models, settings, concurrency)
