"""Speculation OFF vs ON over the same tasks in one process: the runner as a library.

`Comparison` is what both `python -m runners.run` and the tuner drive: it takes already-loaded
models (no reload per trial), optionally an OFF baseline measured earlier (once per study), and
yields one `TaskOutcome` per task and repeat as soon as both sides are known, so a caller can report
it to a pruner or stop (closing the iterator stops after the current task). `skip` leaves out task
runs already measured (a resumed run); the others keep the seeds they would have had.

Measurement rules (DESIGN.md §6, the RTX 4060 study in the seeds): OFF and ON alternate task by
task so machine drift hits both equally; an untimed warm-up runs first; every repeat starts with an
empty suffix index, and OFF never feeds ON's index (separate engines); both sides use the same
session seed per task, so greedy streams are directly comparable token by token.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.episode import run_episode
from agents.loop import AgentConfig
from engine.engine import EngineConfig
from engine.stats import GenerationStats
from runners.backends import Backend, ServerSettings, make_backend
from runners.config import baseline_config
from runners.models import Models
from runners.outcomes import SideRun, TaskOutcome
from tasks.environment import TaskEnvironment
from tasks.schema import Instance

REPEAT_SEED_STRIDE = 1_000_003  # sampled runs get a different seed per repeat, the same for both sides
WARMUP_PROMPT = "def fibonacci(n):\n    return"


@dataclass
class Baseline:
    """OFF results measured earlier, by (instance_id, repeat); reused instead of re-running OFF."""

    runs: dict[tuple[str, int], SideRun]

    @classmethod
    def from_outcomes(cls, outcomes: list[TaskOutcome]) -> Baseline:
        """Collect the baseline side of finished outcomes."""
        return cls({(o.instance_id, o.repeat): o.baseline for o in outcomes if o.baseline is not None})


class Comparison:
    """One candidate configuration against the OFF baseline over a list of tasks."""

    def __init__(
        self,
        models: Models,
        candidate: EngineConfig | None,
        instances: list[Instance],
        environment: TaskEnvironment,
        agent: AgentConfig,
        out_dir: Path,
        *,
        repeats: int = 1,
        warmup: bool = True,
        baseline: Baseline | None = None,
        model_name: str = "model",
        plain: EngineConfig | None = None,
        skip: Collection[tuple[str, int]] = (),
        server: ServerSettings | None = None,
    ) -> None:
        self.models = models
        self.instances = instances
        self.environment = environment
        self.agent = agent
        self.out_dir = Path(out_dir)
        self.repeats = repeats
        self.warmup = warmup
        self.baseline = baseline
        self.model_name = model_name
        self.skip = set(skip)  # (instance_id, repeat) pairs not to run (already measured)
        # The baseline takes the candidate's sampling and seed; without a candidate, `plain`'s (default greedy).
        reference = candidate if candidate is not None else (plain or EngineConfig())
        self.seed = reference.seed
        # Each side's decoder (runners/backends.py): the built-in engine, or a llama-server started on first use.
        self.baseline_engine: Backend | None = None
        if baseline is None:
            self.baseline_engine = make_backend(baseline_config(reference), models, server)
        self.candidate_engine: Backend | None = None
        self.unsupported: str | None = None  # why the candidate cannot run on these models
        if candidate is not None:
            try:
                # the engine keeps only what the drafter needs (Engine.needs)
                self.candidate_engine = make_backend(candidate, models, server)
            except ValueError as exc:  # e.g. draft_model without a draft, tokenizers that differ, no MTP weights
                self.unsupported = str(exc)

    @property
    def lossy(self) -> bool:
        """The candidate's acceptance rule may change outputs."""
        return bool(self.candidate_engine is not None and self.candidate_engine.lossy)

    @property
    def greedy(self) -> bool:
        """Greedy decoding: ON and OFF token streams must match exactly under exact acceptance."""
        engine = self.candidate_engine or self.baseline_engine
        return engine is not None and engine.config.temperature == 0.0

    def __iter__(self) -> Iterator[TaskOutcome]:
        return self.run()

    def run(self) -> Iterator[TaskOutcome]:
        """Yield each task's OFF and ON results, repeat by repeat, task by task (those in `skip` left out).

        Servers a backend started are stopped when the iteration ends, however it ends.
        """
        try:
            yield from self._run()
        finally:
            self.close()

    def describe(self) -> dict[str, Any]:
        """What decodes each side (runners/backends.py), for the summary."""
        sides = {"baseline": self.baseline_engine, "candidate": self.candidate_engine}
        return {name: backend.describe() for name, backend in sides.items() if backend is not None}

    def close(self) -> None:
        """Stop what the backends started (llama-server processes); a later run starts them again."""
        for backend in (self.baseline_engine, self.candidate_engine):
            if backend is not None:
                backend.close()

    def _run(self) -> Iterator[TaskOutcome]:
        if self.warmup and self.remaining():
            self._warm_up()
        for repeat in range(self.repeats):
            if self.candidate_engine is not None:
                self.candidate_engine.reset()  # every repeat starts from the same drafter state
            for index, instance in enumerate(self.instances):
                if (instance.instance_id, repeat) in self.skip:
                    continue
                seed = self.seed + index + REPEAT_SEED_STRIDE * repeat
                if self.baseline is not None:
                    base = self.baseline.runs.get((instance.instance_id, repeat))
                else:
                    base = self._episode("baseline", self.baseline_engine, instance, repeat, seed)
                cand = None
                if self.candidate_engine is not None:
                    cand = self._episode("candidate", self.candidate_engine, instance, repeat, seed)
                yield TaskOutcome(instance.instance_id, index, repeat, base, cand)

    def remaining(self) -> int:
        """Task runs this comparison will run (tasks x repeats, less `skip`)."""
        return sum((i.instance_id, repeat) not in self.skip for repeat in range(self.repeats) for i in self.instances)

    def _warm_up(self) -> None:
        """One short untimed generation per engine (first-call allocations, kernel selection)."""
        tokenizer = self.models.target.tokenizer
        prompt = tokenizer.encode(WARMUP_PROMPT)
        for backend in (self.baseline_engine, self.candidate_engine):
            if backend is not None:
                backend.warm_up(prompt)  # and forgets it: the warm-up must not teach the suffix drafter anything

    def _episode(self, side: str, backend: Backend, instance: Instance, repeat: int, seed: int) -> SideRun:
        """Run the agent on one task with one side's backend, then grade its final diff in a fresh sandbox."""
        tokenizer = self.models.target.tokenizer
        model = backend.agent_model(tokenizer, self.model_name, seed)
        trajectory = self.out_dir / "trajectories" / side / f"r{repeat}" / f"{instance.instance_id}.json"
        episode = run_episode(instance, model, self.environment, tokenizer, self.agent, trajectory)
        result = episode.agent
        if episode.evaluation is not None:
            evaluation = episode.evaluation
            evaluation_status, evaluation_s, success = evaluation.status, evaluation.duration_s, evaluation.resolved
        else:
            evaluation_status, evaluation_s, success = "not_submitted", 0.0, False
        return SideRun(
            instance_id=instance.instance_id,
            side=side,
            repeat=repeat,
            status=result.status,
            success=success,
            evaluation_status=evaluation_status,
            time_s=result.wall_s,
            evaluation_s=evaluation_s,
            steps=result.steps,
            message=result.message,
            patch=result.patch,
            max_context_tokens=result.max_context_tokens,
            stats=result.stats if result.stats is not None else GenerationStats(),
            generated_ids=list(result.generated_ids),
            trajectory=str(trajectory) if trajectory.exists() else None,
        )
