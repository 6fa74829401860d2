"""Per-task results of a run: one `SideRun` per side, task and repeat; a `TaskOutcome` pairs them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.recording import Conversation, first_divergence
from engine.stats import GenerationStats

SIDES = ("baseline", "candidate")  # speculation OFF, speculation ON


@dataclass
class SideRun:
    """One agent episode of one configuration on one task in one repeat, evaluated afterwards."""

    instance_id: str
    side: str  # baseline | candidate
    repeat: int
    status: str  # the agent's exit status (submitted, step_limit, ...)
    success: bool  # submitted and resolved by the evaluation
    evaluation_status: str  # resolved | unresolved | patch_failed | ... (tasks.evaluation.STATUSES)
    time_s: float  # agent wall time: generation + tool commands (evaluation excluded)
    evaluation_s: float  # wall time of the separate evaluation
    steps: int = 0
    message: str = ""
    patch: str = ""
    max_context_tokens: int = 0
    stats: GenerationStats = field(default_factory=GenerationStats)
    generated_ids: list[int] = field(default_factory=list)  # every model token of the episode, in order
    trajectory: str | None = None  # path of the saved trajectory
    model_s: float = 0.0  # of time_s, seconds inside the model's replies (generation); the rest is the agent's work
    conversation: Conversation | None = None  # every turn's prompt and reply, when the run was recorded
    clocks: dict[str, float] = field(default_factory=dict)  # generation seconds by clock (agents.recording.CLOCKS)

    def generation_s(self, clock: str = "wall") -> float:
        """Seconds inside the model's replies on `clock` (wall: model_s)."""
        return self.clocks.get(clock, self.model_s) if clock != "wall" else self.model_s

    def time_on(self, clock: str = "wall") -> float:
        """The run's agent time with its generation measured on `clock`: the agent's own work (tools, parsing,
        prompts) in wall seconds plus generation on `clock` (wall: `time_s` itself)."""
        return self.time_s - self.model_s + self.generation_s(clock)

    def to_dict(self, with_tokens: bool = False) -> dict[str, Any]:
        """JSON-ready (token streams only when asked: they are long)."""
        out = {
            "instance_id": self.instance_id,
            "side": self.side,
            "repeat": self.repeat,
            "status": self.status,
            "success": self.success,
            "evaluation_status": self.evaluation_status,
            "time_s": self.time_s,
            "evaluation_s": self.evaluation_s,
            "steps": self.steps,
            "message": self.message,
            "max_context_tokens": self.max_context_tokens,
            "stats": self.stats.to_dict(),
            "trajectory": self.trajectory,
        }
        out["model_s"] = self.model_s
        out["clocks"] = dict(self.clocks)
        if with_tokens:
            out["generated_ids"] = list(self.generated_ids)
            if self.conversation is not None:
                out["conversation"] = self.conversation.to_dict()
        return out


@dataclass
class TaskOutcome:
    """Both sides of one task in one repeat, yielded by the runner as soon as they are known."""

    instance_id: str
    index: int  # position of the task in the suite selection
    repeat: int
    baseline: SideRun | None  # None when a pre-measured baseline was supplied and is missing this task
    candidate: SideRun | None  # None when the candidate is unsupported

    @property
    def first_divergence(self) -> int | None:
        """First token position where the ON and OFF streams differ (None when identical or not comparable)."""
        if self.baseline is None or self.candidate is None:
            return None
        return first_divergence(self.baseline.generated_ids, self.candidate.generated_ids)

    def time_ratio(self) -> float | None:
        """candidate time / baseline time for this task (what a pruner compares), None if unknown."""
        if self.baseline is None or self.candidate is None or self.baseline.time_s <= 0:
            return None
        return self.candidate.time_s / self.baseline.time_s
