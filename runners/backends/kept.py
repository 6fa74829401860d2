"""Backends kept across comparisons: OFF's llama-server started once per study instead of once per trial.

Every trial of a study runs OFF with one configuration (`--spec-type none`, the same weights and flags), so its
server need not be started, loaded and warmed again for each trial: the tuner hands its comparisons one
`KeptBackends`, and a comparison takes OFF's backend from it and leaves it running when it ends. Nothing a task
leaves behind carries over: a task's first request starts from a fresh KV (`cache_prompt: false`) and OFF has no
drafter state. The tuner closes them when the study's work is done; a kept server also dies with its process
(its parent-death signal), so none outlives the run.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict
from typing import Any

from engine.engine import EngineConfig
from runners.backends import make_backend
from runners.backends.base import Backend


class KeptBackends:
    """Backends by (configuration, settings, agents at once), made on first use and closed by `close()`."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, int, int], tuple[Backend, Any]] = {}
        self._lock = threading.Lock()
        self.made = 0  # backends made so far (a test counts server starts with it)

    def get(self, config: EngineConfig, models: Any, settings: Any, concurrency: int) -> Backend:
        """The kept backend for these, made now (make_backend) if none is kept yet."""
        # the settings object itself is the study's, shared by every trial: its identity is the key, and it is
        # held beside the backend so that the identity cannot be reused by another object
        key = (json.dumps(asdict(config), sort_keys=True, default=str), id(settings), concurrency)
        with self._lock:
            if key not in self._kept:
                self._kept[key] = (make_backend(config, models, settings, concurrency), settings)
                self.made += 1
            return self._kept[key][0]

    def owns(self, backend: Backend) -> bool:
        """Whether `backend` is one of these (a comparison leaves it running)."""
        return any(kept is backend for kept, _ in self._kept.values())

    def close(self) -> None:
        """Stop every kept backend's servers; a later `get` makes them again."""
        with self._lock:
            kept, self._kept = list(self._kept.values()), {}
        for backend, _ in kept:
            backend.close()
