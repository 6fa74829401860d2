"""Speculation OFF vs ON over the same tasks in one process: the runner as a library.

`Comparison` is what both `python -m runners.run` and the tuner drive: it takes a `Workload` (models
loaded once, tasks, environment, agent limits, repeats), optionally OFF runs measured earlier, and
yields one `TaskOutcome` per task and repeat as soon as both sides are known, so a caller can report
it to a pruner or stop (closing the iterator stops after the current task). `skip` leaves out task
runs already measured (a resumed run); the others keep the seeds they would have had. `record=True`
keeps OFF's conversations (every turn's prompt and reply) for a later replay (runners/replay.py).

Measurement rules (DESIGN.md §6, the RTX 4060 study in the seeds): OFF and ON run task by task and
take turns going first (task i of repeat r: OFF first when i + r is even), so machine drift hits both
alike; an untimed warm-up runs first (a short generation per side, then one short agent episode per
side on the first task: the task environment is built and every model path runs once at agent
context lengths); every repeat starts with an empty suffix index, and OFF never feeds ON's index
(separate engines); both sides use the same session seed per task, so greedy streams are directly
comparable token by token.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from agents.episode import run_episode
from agents.model import AgentModel
from agents.recording import ClockedModel, Conversation, RecordingModel, TurnClock
from common.errors import UnsupportedConfig
from engine.engine import EngineConfig
from engine.stats import GenerationStats
from runners.backends import Backend, make_backend
from runners.concurrency import AbortableModel, Wave, run_wave
from runners.config import baseline_config
from runners.outcomes import SideRun, TaskOutcome
from runners.workload import Workload
from tasks.schema import Instance

REPEAT_SEED_STRIDE = 1_000_003  # sampled runs get a different seed per repeat, the same for both sides
WARMUP_PROMPT = "def fibonacci(n):\n    return"
WARMUP_STEPS = 2  # turns of the untimed warm-up episode


@dataclass(frozen=True)
class Event:
    """One thing a comparison ran: a warm-up, an agent episode, or a replayed turn."""

    kind: str  # warm-up | episode | turn
    side: str  # baseline | candidate
    instance_id: str
    repeat: int  # -1 for a warm-up
    turn: int | None = None  # the replayed turn


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
        workload: Workload,
        candidate: EngineConfig | None,
        out_dir: Path,
        *,
        baseline: Baseline | None = None,
        skip: Collection[tuple[str, int]] = (),
        record: bool = False,
    ) -> None:
        self.workload = workload
        self.models = workload.models
        self.instances = workload.instances
        self.repeats = workload.repeats
        self.out_dir = Path(out_dir)
        self.baseline = baseline
        self.skip = set(skip)  # (instance_id, repeat) pairs not to run (already measured)
        self.record = record  # keep OFF's conversations (SideRun.conversation)
        self.events: list[Event] = []  # what ran, in order (the interleaving, for reports and tests)
        self.concurrency = workload.concurrency  # agents in flight at once (runners/concurrency.py)
        self.waves: list[Wave] = []  # at concurrency > 1: each side's pass over each repeat's tasks
        self._abort = threading.Event()  # set when a wave is interrupted: its agents stop at their next call
        # Progress inside a wave: (wave, run, finished, total) as each of its episodes ends (runners/report.py).
        self.on_episode: Callable[[Wave, SideRun, int, int], None] | None = None
        # The baseline takes the candidate's sampling and seed; without a candidate, `plain`'s (default greedy).
        reference = candidate if candidate is not None else (workload.plain or EngineConfig())
        self.seed = reference.seed
        # Each side's decoder (runners/backends/): the built-in engine, or a llama-server started on first use.
        self.baseline_engine: Backend | None = None
        if baseline is None:
            make = workload.kept.get if workload.kept is not None else make_backend
            self.baseline_engine = make(
                baseline_config(reference),
                workload.models,
                workload.baseline_server or workload.server,
                self.concurrency,
            )
        self.candidate_engine: Backend | None = None
        self.unsupported: str | None = None  # why the candidate cannot run on these models
        if candidate is not None:
            try:
                # the engine keeps only what the drafter needs (Engine.needs)
                self.candidate_engine = make_backend(candidate, workload.models, workload.server, self.concurrency)
            except UnsupportedConfig as exc:  # e.g. draft_model without a draft, tokenizers that differ, no MTP
                self.unsupported = str(exc)  # weights; any other error is a bug and propagates with its traceback

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
        """What decodes each side (runners/backends/), for the summary."""
        return {name: backend.describe() for name, backend in self.sides().items()}

    def sides(self) -> dict[str, Backend]:
        """The backends this comparison runs, by side."""
        sides = {"baseline": self.baseline_engine, "candidate": self.candidate_engine}
        return {name: backend for name, backend in sides.items() if backend is not None}

    def close(self) -> None:
        """Stop what the backends started (llama-server processes; kept ones stay up); a later run starts them again."""
        for backend in self.sides().values():
            if self.workload.kept is None or not self.workload.kept.owns(backend):
                backend.close()

    def _run(self) -> Iterator[TaskOutcome]:
        if self.workload.warmup and self.remaining():
            self.warm_up()
        if self.concurrency > 1:
            yield from self._run_waves()
            return
        for repeat in range(self.repeats):
            if self.candidate_engine is not None:
                self.candidate_engine.reset()  # every repeat starts from the same drafter state
            for index, instance in enumerate(self.instances):
                if (instance.instance_id, repeat) in self.skip:
                    continue
                seed = self.seed + index + REPEAT_SEED_STRIDE * repeat
                runs: dict[str, SideRun | None] = {"baseline": None, "candidate": None}
                if self.baseline is not None:
                    runs["baseline"] = self.baseline.runs.get((instance.instance_id, repeat))
                for side in side_order(index, repeat):
                    backend = self.sides().get(side)
                    if backend is not None:
                        runs[side] = self.episode(side, backend, instance, repeat, seed)
                yield TaskOutcome(instance.instance_id, index, repeat, runs["baseline"], runs["candidate"])

    def _run_waves(self) -> Iterator[TaskOutcome]:
        """concurrency > 1: per repeat, each side's tasks by N agents at once (runners/concurrency.py)."""
        for repeat in range(self.repeats):
            if self.candidate_engine is not None:
                self.candidate_engine.reset()
            todo = [(i, inst) for i, inst in enumerate(self.instances) if (inst.instance_id, repeat) not in self.skip]
            if not todo:
                continue
            runs: dict[str, dict[int, SideRun]] = {"baseline": {}, "candidate": {}}
            for side in side_order(0, repeat):
                backend = self.sides().get(side)
                if backend is None:
                    continue
                wave = Wave(side, repeat, self.concurrency)
                run_wave(wave, todo, partial(self._wave_episode, backend, wave), self._abort, self.on_episode)
                self.waves.append(wave)
                runs[side] = {index: run for (index, _), run in zip(todo, wave.runs, strict=True)}
            for index, instance in todo:
                base = runs["baseline"].get(index)
                if base is None and self.baseline is not None:
                    base = self.baseline.runs.get((instance.instance_id, repeat))
                yield TaskOutcome(instance.instance_id, index, repeat, base, runs["candidate"].get(index))

    def _wave_episode(self, backend: Backend, wave: Wave, task: tuple[int, Instance]) -> SideRun:
        """One task of a wave, on one of its threads (the seed as in a serial run: same per task and repeat)."""
        index, instance = task
        seed = self.seed + index + REPEAT_SEED_STRIDE * wave.repeat
        return self.episode(wave.side, backend, instance, wave.repeat, seed, wave=wave)

    def remaining(self) -> int:
        """Task runs this comparison will run (tasks x repeats, less `skip`)."""
        return sum((i.instance_id, repeat) not in self.skip for repeat in range(self.repeats) for i in self.instances)

    def warm_up(self) -> None:
        """Untimed: a short generation per side, then a short agent episode per side on the first task.

        Each side forgets what it learned (the suffix index), so the measured runs start as without it.
        """
        tokenizer = self.models.target.tokenizer
        prompt = tokenizer.encode(WARMUP_PROMPT)
        for backend in self.sides().values():
            backend.warm_up(prompt)
        if not self.instances:
            return
        instance = self.instances[0]
        short = replace(self.workload.agent, max_steps=WARMUP_STEPS)
        for side, backend in self.sides().items():
            self.events.append(Event("warm-up", side, instance.instance_id, -1))
            model = backend.agent_model(tokenizer, self.workload.model_name, self.seed)
            run_episode(instance, model, self.workload.environment, tokenizer, short, None)
            backend.reset()

    def episode(
        self, side: str, backend: Backend, instance: Instance, repeat: int, seed: int, wave: Wave | None = None
    ) -> SideRun:
        """Run the agent on one task with one side's backend, then grade its final diff in a fresh sandbox.

        In a wave (several agents at once) it runs on one of the wave's threads, its model calls timed into
        the wave's latencies and stopped when the wave is interrupted.
        """
        self.events.append(Event("episode", side, instance.instance_id, repeat))
        tokenizer = self.models.target.tokenizer
        clock = TurnClock(cuda=self.models.target.device.type == "cuda")
        model: AgentModel = ClockedModel(backend.agent_model(tokenizer, self.workload.model_name, seed), clock)
        if wave is not None:
            model = AbortableModel(model, self._abort, wave.latencies_s)
        conversation = None
        if self.record and side == "baseline":
            conversation = Conversation(instance.instance_id)
            model = RecordingModel(model, conversation)
        trajectory = self.out_dir / "trajectories" / side / f"r{repeat}" / f"{instance.instance_id}.json"
        w = self.workload
        episode = run_episode(instance, model, w.environment, tokenizer, w.agent, trajectory)
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
            model_s=result.model_s,
            conversation=conversation,
            clocks=dict(clock.totals),
        )


def side_order(index: int, repeat: int) -> tuple[str, str]:
    """Which side of task `index` in `repeat` goes first: they take turns, so drift hits both alike."""
    return ("baseline", "candidate") if (index + repeat) % 2 == 0 else ("candidate", "baseline")
