"""`engine.backend=builtin`: spectune's own engine, `Engine` + `EngineModel` in this process."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

from agents.engine_model import EngineModel
from agents.model import AgentModel
from engine.drafters import Needs, resolve_drafter
from engine.engine import Engine, EngineConfig
from engine.scheduler import Scheduler


class EngineBackend:
    """spectune's own engine."""

    name: ClassVar[str] = "builtin"  # also EngineConfig.backend's default (engine/engine.py)
    lossless_only: ClassVar[bool] = False  # runs the lossy acceptance rules too
    measures_memory: ClassVar[bool] = False  # torch measures a peak on CUDA only; elsewhere the estimate stands
    peak_memory_label: ClassVar[str | None] = None
    export_target: ClassVar[str | None] = None  # runs spectune's own configuration, no server's flags
    fingerprinted: ClassVar[bool] = False  # studies made before backends existed keep their fingerprint
    decodes_in_process: ClassVar[bool] = True  # the generating thread is this process's own
    starts_per_trial: ClassVar[int] = 0  # the loaded weights are the study's; a drafter builds in no time to speak of

    def __init__(self, engine: Engine, concurrency: int = 1) -> None:
        self.engine = engine
        self.config = engine.config
        self.lossy = engine.lossy
        self.concurrency = concurrency
        # Several agents at once: their turns are decoded together, one batch per step (engine/scheduler.py).
        self.scheduler: Scheduler | None = None
        self._lock = threading.Lock()  # the wave's agents ask for models at the same moment: one scheduler
        # What the schedulers served so far: generations, tokens, batch steps and the largest batch.
        self.served = {"generations": 0, "tokens": 0, "steps": 0, "max_batch": 0}

    @classmethod
    def settings_from(cls, cfg: Any, models: Any, log_dir: Path, needs: Needs) -> None:
        """Nothing: the engine runs on the loaded models as they are."""
        return None

    @classmethod
    def not_runnable(cls, config: EngineConfig) -> str | None:
        """A drafter only llama-server runs (dflash, dspark), else None: the engine refuses the rest when built."""
        return resolve_drafter(config.drafter).refusal or None

    @classmethod
    def create(cls, config: EngineConfig, models: Any, settings: Any | None, concurrency: int = 1) -> EngineBackend:
        """An Engine on the loaded target, draft and MTP module (runners.models.Models)."""
        return cls(Engine(models.target, config, draft=models.draft, mtp=models.mtp, eagle3=models.eagle3), concurrency)

    @classmethod
    def announce(cls, described: dict[str, Any]) -> str | None:
        """None: the run's own header already says what the engine runs."""
        return None

    def agent_model(self, tokenizer: Any, name: str, seed: int) -> AgentModel:
        """An EngineModel: one engine session per task (its turns batched with the others' at concurrency > 1)."""
        with self._lock:
            if self.concurrency > 1 and self.scheduler is None:
                self.scheduler = Scheduler(self.engine)
            scheduler = self.scheduler
        return EngineModel(self.engine, tokenizer, name, seed=seed, scheduler=scheduler)

    def warm_up(self, prompt: list[int]) -> None:
        """Generate 16 tokens (as many sessions at once as agents will run), then forget them.

        The suffix drafter must learn nothing from the warm-up; at concurrency N the batch of N runs once.
        """
        self.engine.generate_together([prompt] * self.concurrency, 16)
        self.engine.reset_drafter_state()

    def reset(self) -> None:
        """Empty engine-wide drafter state (suffix index)."""
        self.engine.reset_drafter_state()

    def close(self) -> None:
        """Stop the scheduler's decode thread, if one runs (a later agent model starts a new one)."""
        with self._lock:
            s, self.scheduler = self.scheduler, None
        if s is not None:
            s.close()
            served = self.served
            served["generations"] += s.generations
            served["tokens"] += s.tokens
            served["steps"] += s.steps
            served["max_batch"] = max([served["max_batch"], *s.batch_sizes])

    def describe(self) -> dict[str, Any]:
        """The backend's name (the numeric path is in the run's provenance)."""
        out: dict[str, Any] = {"backend": self.name, "concurrency": self.concurrency}
        if self.concurrency > 1:
            out["served"] = dict(self.served)  # the scheduler's batches (filled once the comparison has closed)
        return out
