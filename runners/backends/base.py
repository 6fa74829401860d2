"""What every backend is: the instance interface the comparison drives, and the class hooks the callers ask.

The callers (runners/run.py, runners/report.py, tuner/setup.py, tuner/space.py, tuner/objective.py) look a
backend class up by its `engine.backend` name (runners.backends.backend_class) and read a hook, so adding a
backend is one module and one registry line, not a new `if name == ...` at each of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol

from agents.model import AgentModel
from engine.drafters import Needs
from engine.engine import EngineConfig


class Backend(Protocol):
    """One side's decoder: agent models for tasks, warm-up, drafter reset, clean shutdown."""

    # -- class hooks: what callers need to know before (or without) building one --
    name: ClassVar[str]  # the `engine.backend` value that selects it
    lossless_only: ClassVar[bool]  # verifies exactly only: a search space may not allow lossy acceptance
    measures_memory: ClassVar[bool]  # its peak memory is measured on every device, not only on CUDA
    peak_memory_label: ClassVar[str | None]  # the report's peak-memory row when it measures something else
    export_target: ClassVar[str | None]  # the export/fit.py server whose exported flags it runs, if any
    fingerprinted: ClassVar[bool]  # a study names it in its fingerprint (builtin predates backends: not)
    # decoding runs in this Python process (its CPU clock sees it, and it needs the weights loaded); a server: not
    decodes_in_process: ClassVar[bool]
    # sides a replayed trial starts afresh (a build or server start and its warm-up): what the projection adds
    starts_per_trial: ClassVar[int]

    @classmethod
    def settings_from(cls, cfg: Any, models: Any, log_dir: Path, needs: Needs) -> Any | None:
        """The backend's own settings, from the run's config, for drafters that need `needs` (None: nothing).

        What `create` takes besides the models; opaque to everyone else (runners.workload.Workload carries it).
        """
        ...

    @classmethod
    def not_runnable(cls, config: EngineConfig) -> str | None:
        """Why this backend cannot run `config` as given, else None."""
        ...

    @classmethod
    def create(cls, config: EngineConfig, models: Any, settings: Any | None, concurrency: int = 1) -> Backend:
        """A backend for `config` on the loaded models (and its `settings_from` settings) serving `concurrency`
        agents at once (common.errors.UnsupportedConfig: it cannot run `config` on these models or settings)."""
        ...

    @classmethod
    def announce(cls, described: dict[str, Any]) -> str | None:
        """What a run prints about a side this backend decodes (its `describe()`), before it starts; None: nothing."""
        ...

    # -- the instance: one side of a comparison --
    config: EngineConfig
    lossy: bool

    def agent_model(self, tokenizer: Any, name: str, seed: int) -> AgentModel:
        """The model the agent talks to for one task (sampling seeded with `seed`)."""
        ...

    def warm_up(self, prompt: list[int]) -> None:
        """One short untimed generation (first-call allocations), leaving no drafter state behind."""
        ...

    def reset(self) -> None:
        """Forget what the drafter learned across tasks (a repeat starts from the same state)."""
        ...

    def close(self) -> None:
        """Release what the backend started (a server process)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What decodes this side, for the summary (backend name; a server's binary, weights and argv)."""
        ...
