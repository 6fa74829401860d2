"""`engine.backend=builtin`: spectune's own engine, `Engine` + `EngineModel` in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from agents.engine_model import EngineModel
from agents.model import AgentModel
from engine.engine import Engine, EngineConfig


class EngineBackend:
    """spectune's own engine."""

    name: ClassVar[str] = "builtin"  # also EngineConfig.backend's default (engine/engine.py)
    lossless_only: ClassVar[bool] = False  # runs the lossy acceptance rules too
    measures_memory: ClassVar[bool] = False  # torch measures a peak on CUDA only; elsewhere the estimate stands
    peak_memory_label: ClassVar[str | None] = None
    export_target: ClassVar[str | None] = None  # runs spectune's own configuration, no server's flags
    fingerprinted: ClassVar[bool] = False  # studies made before backends existed keep their fingerprint

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.config = engine.config
        self.lossy = engine.lossy

    @classmethod
    def settings_from(cls, cfg: Any, models: Any, log_dir: Path, *, draft: bool, mtp: bool) -> None:
        """Nothing: the engine runs on the loaded models as they are."""
        return None

    @classmethod
    def not_runnable(cls, config: EngineConfig) -> str | None:
        """None: the engine refuses what it cannot run itself, when it is built."""
        return None

    @classmethod
    def create(cls, config: EngineConfig, models: Any, server: Any | None) -> EngineBackend:
        """An Engine on the loaded target, draft and MTP module (runners.models.Models)."""
        return cls(Engine(models.target, config, draft=models.draft, mtp=models.mtp))

    @classmethod
    def announce(cls, described: dict[str, Any]) -> str | None:
        """None: the run's own header already says what the engine runs."""
        return None

    def agent_model(self, tokenizer: Any, name: str, seed: int) -> AgentModel:
        """An EngineModel: one engine session per task."""
        return EngineModel(self.engine, tokenizer, name, seed=seed)

    def warm_up(self, prompt: list[int]) -> None:
        """Generate 16 tokens, then forget them (the suffix drafter must learn nothing from the warm-up)."""
        self.engine.generate(prompt, 16)
        self.engine.reset_drafter_state()

    def reset(self) -> None:
        """Empty engine-wide drafter state (suffix index)."""
        self.engine.reset_drafter_state()

    def close(self) -> None:
        """Nothing to stop."""

    def describe(self) -> dict[str, Any]:
        """The backend's name (the numeric path is in the run's provenance)."""
        return {"backend": self.name}
