"""Paired replay: a candidate and OFF both replay OFF's recorded agent conversations, turn by turn, interleaved.

Under greedy decoding with exact acceptance a candidate provably answers every prompt with OFF's tokens, so
the agent would run the same commands, see the same observations and submit the same diff: only generation
time can differ. Instead of re-running the agent (sandboxes, tools, grading), `ReplayComparison` sends every
recorded turn through both sides in one session per side and task (prefix reuse across turns exactly as in
the live agent), taking turns on which side goes first at every turn, so machine drift hits both alike. A
side's task time is the recording's own agent work (wall seconds outside generation: tools, parsing, prompts)
plus that side's measured generation (wall seconds; every clock of agents.recording.TurnClock is kept beside
it, `SideRun.time_on` reads another); success, status and diff are the recording's.

A replayed reply that differs from the recording is never used silently: the task's replay stops there, the
divergence is kept (task, side, turn, first differing position, and whether the target's top-2 logit margin
there is within the model dtype's rounding, a near-tie, or beyond it, a bug), and that task is measured live
(both sides run the real agent, in turn) instead. What replay assumes, and what the live confirmation checks:
the agent's wall-time limit is not re-applied (a much slower candidate would hit it live), and generation
between tool runs costs what it costs back to back.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from agents.recording import Replayer
from engine.engine import EngineConfig
from runners.compare import REPEAT_SEED_STRIDE, Comparison, Event, side_order
from runners.outcomes import SideRun, TaskOutcome
from runners.workload import Workload
from tasks.schema import Instance

# Top-2 logit margin, relative to max(1, |top-1 logit|), below which a divergence counts as a near-tie of the
# dtype's rounding: one verify forward over k tokens and k single-token forwards add in other orders.
NEAR_TIE = {"float64": 1e-9, "float32": 1e-4, "bfloat16": 3e-2, "float16": 5e-3}


class ReplayComparison(Comparison):
    """A candidate against OFF on recorded conversations: yields `TaskOutcome`s like `Comparison`."""

    def __init__(
        self,
        workload: Workload,
        candidate: EngineConfig,
        out_dir: Path,
        recording: dict[tuple[str, int], SideRun],
    ) -> None:
        super().__init__(workload, candidate, out_dir)
        self.recording = recording  # (instance_id, repeat) -> OFF's recorded run (with its conversation)
        self.divergences: list[dict[str, Any]] = []
        self.live_tasks: list[tuple[str, int]] = []  # (instance_id, repeat) measured live after a divergence

    def recorded(self, instance_id: str, repeat: int) -> SideRun:
        """The recorded OFF run a task's replay follows (the same repeat when recorded, else repeat 0)."""
        run = self.recording.get((instance_id, repeat)) or self.recording.get((instance_id, 0))
        if run is None or run.conversation is None:
            raise ValueError(f"no recorded conversation of task {instance_id} to replay")
        return run

    def warm_up(self) -> None:
        """Untimed: the first recorded turn through both sides, then the drafter's state forgotten."""
        if not self.instances:
            return
        first = self.recorded(self.instances[0].instance_id, 0)
        for side, backend in self.sides().items():
            self.events.append(Event("warm-up", side, first.instance_id, -1, 0))
            model = backend.agent_model(self.models.target.tokenizer, "warm-up", self.seed)
            replayer = Replayer(model, first.conversation)
            replayer.begin()
            try:
                replayer.step(0)
            finally:
                replayer.end()
            backend.reset()

    def _run(self) -> Iterator[TaskOutcome]:
        if self.workload.warmup and self.remaining():
            self.warm_up()
        for repeat in range(self.repeats):
            assert self.candidate_engine is not None
            self.candidate_engine.reset()  # every repeat starts from the same drafter state
            for index, instance in enumerate(self.instances):
                if (instance.instance_id, repeat) in self.skip:
                    continue
                runs = self._replay(instance, index, repeat)
                if runs is None:  # a reply differed from the recording: measure this task live
                    self.live_tasks.append((instance.instance_id, repeat))
                    seed = self.seed + index + REPEAT_SEED_STRIDE * repeat
                    runs = {}
                    for side in side_order(index, repeat):
                        runs[side] = self.episode(side, self.sides()[side], instance, repeat, seed)
                yield TaskOutcome(instance.instance_id, index, repeat, runs["baseline"], runs["candidate"])

    def _replay(self, instance: Instance, index: int, repeat: int) -> dict[str, SideRun] | None:
        """Both sides through the task's recorded turns, taking turns at every turn; None on a divergence."""
        recorded = self.recorded(instance.instance_id, repeat)
        conversation = recorded.conversation
        assert conversation is not None
        tokenizer = self.models.target.tokenizer
        cuda = self.models.target.device.type == "cuda"
        seed = self.seed + index + REPEAT_SEED_STRIDE * repeat
        replayers = {
            side: Replayer(backend.agent_model(tokenizer, self.workload.model_name, seed), conversation, cuda=cuda)
            for side, backend in self.sides().items()
        }
        for replayer in replayers.values():
            replayer.begin()
        try:
            for turn in range(len(conversation.turns)):
                for side in side_order(index + turn, repeat):
                    self.events.append(Event("turn", side, instance.instance_id, repeat, turn))
                    if not replayers[side].step(turn):
                        self._diverged(instance.instance_id, repeat, side, replayers[side])
                        return None
        finally:
            for replayer in replayers.values():
                replayer.end()
        agent_work = recorded.time_s - recorded.model_s
        runs = {}
        for side, replayer in replayers.items():
            done = replayer.result
            clocks = dict(done.clocks)
            runs[side] = SideRun(
                instance_id=instance.instance_id,
                side=side,
                repeat=repeat,
                status=recorded.status,
                success=recorded.success,
                evaluation_status=recorded.evaluation_status,
                time_s=agent_work + clocks["wall"],
                evaluation_s=0.0,  # not graded again: the same diff as the recording's
                steps=recorded.steps,
                message=recorded.message,
                patch=recorded.patch,
                max_context_tokens=recorded.max_context_tokens,
                stats=done.stats,
                generated_ids=done.generated_ids,
                model_s=clocks["wall"],
                clocks=clocks,
            )
        return runs

    def _diverged(self, instance_id: str, repeat: int, side: str, replayer: Replayer) -> None:
        """Keep the divergence with its kind (near-tie of the dtype, or a bug)."""
        d = replayer.result.divergence
        assert d is not None
        turn = replayer.conversation.turns[d.turn]
        row = {"instance_id": instance_id, "repeat": repeat, "side": side, **d.to_dict()}
        row.update(classify(self.models.target, turn.prompt + turn.reply[: d.position]))
        self.divergences.append(row)


def classify(target: Any, ids: list[int]) -> dict[str, Any]:
    """The target's top-2 logit margin after `ids` (one plain forward) and what it makes a divergence there.

    `near-tie`: the margin is within the dtype's rounding (NEAR_TIE), so two exact decoders may pick either
    token; `bug`: it is not (or the dtype is float64), so an exact speculative decoder must not have diverged;
    `unclassified`: the target is served by another process (llama-server), whose logits this one cannot see.
    """
    model = target.model
    if model is None:  # a served target (runners.models.ServedModel): no weights here to take the margin with
        return {"kind": "unclassified", "margin": None, "tolerance": None, "dtype": None}
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([ids], device=target.device)).logits[0, -1].double()
    top = torch.topk(logits, 2).values
    margin = float(top[0] - top[1])
    tolerance = NEAR_TIE.get(dtype, 1e-4) * max(1.0, abs(float(top[0])))
    kind = "near-tie" if dtype != "float64" and margin <= tolerance else "bug"
    return {"kind": kind, "margin": margin, "tolerance": tolerance, "dtype": dtype}
