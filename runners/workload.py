"""What a measurement runs on: loaded models, tasks, where they run, the agent's limits, repeats, warm-up.

One value shared by the runner's `Comparison`, the replayed comparison and the tuner's objective, so the
same dozen arguments are not threaded through each of them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agents.loop import AgentConfig
from engine.engine import EngineConfig
from runners.config import agent_config
from runners.models import Models
from tasks.environment import TaskEnvironment
from tasks.schema import Instance


@dataclass(frozen=True)
class Workload:
    """Models, tasks and how they are run: everything both sides of a comparison share."""

    models: Models  # loaded once, shared by every backend
    instances: list[Instance]  # the tasks, in the order they run
    environment: TaskEnvironment  # workspaces, sandboxes, grading
    agent: AgentConfig  # the agent's limits
    repeats: int = 1  # every task runs this many times per side
    warmup: bool = True  # an untimed warm-up before the first measured run
    model_name: str = "model"  # label in trajectories and predictions
    plain: EngineConfig | None = None  # OFF's sampling and backend when there is no candidate (default greedy)
    # The backend's own settings (Backend.settings_from: on llama-server, where its servers come from), handed
    # to the backend as they are; None: the backend needs none (builtin).
    server: Any = None
    # OFF's own backend settings when OFF runs on other weights or KV types than ON (server.reference_*):
    # then ON is measured against that reference live; None: OFF runs on `server` as ON does
    baseline_server: Any = None
    concurrency: int = 1  # agents in flight at once, each side (run.concurrency; runners/concurrency.py)
    # OFF's backends kept across comparisons (runners/backends/kept.py: the tuner's one OFF server per study);
    # None: each comparison makes and stops its own
    kept: Any = None

    @classmethod
    def from_config(
        cls,
        cfg: Any,
        models: Models,
        instances: list[Instance],
        environment: TaskEnvironment,
        *,
        plain: EngineConfig | None = None,
        server: Any = None,
        baseline_server: Any = None,
    ) -> Workload:
        """The workload a composed runner or tuner config describes (agent limits, repeats, warm-up, model name)."""
        return cls(
            models,
            instances,
            environment,
            agent_config(cfg.agent),
            repeats=cfg.run.repeats,
            warmup=cfg.run.warmup,
            model_name=cfg.model.name,
            plain=plain,
            server=server,
            baseline_server=baseline_server,
            concurrency=cfg.run.concurrency,
        )

    def with_(self, **changes: Any) -> Workload:
        """A copy with some fields changed (other tasks, other repeats, ...)."""
        return replace(self, **changes)
