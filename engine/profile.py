"""Where a speculative step's time goes: per-phase seconds and the target forward's cost by fed rows.

Opt-in (an engine's `step_profile`): the decode loop then reads the clock between its parts, and on
CUDA synchronises there, so a profiled generation is a little slower than a plain one. The phases:

    prefill  the first target forward of a turn when it carries the prompt's new tokens (several rows)
    draft    the drafter's proposal (and its `begin` at the start of a turn)
    forward  the target forward of a decode step over its fed rows: the last token and the draft
    accept   the acceptance rule and the stop-token cut
    stats    the step's counters
    crop     the KV rollback to the committed length
    commit   the drafter learning what the step emitted (its own KV, indexes)
    other    the rest of the loop (history, draft-length policy, the turn's end)

`steps` counts decode steps (prefill forwards apart), and `forward_by_rows` keeps, per number of fed
rows, how many decode-step forwards ran and their seconds, so the cost of a k-row verification inside a
generation can be set beside the isolated cost profile's R_k. Per-step views divide every phase,
prefill included, by the decode steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

PHASES = ("prefill", "draft", "forward", "accept", "stats", "crop", "commit", "other")


@dataclass
class StepProfile:
    """Seconds per phase over the profiled steps, and forward seconds by fed rows."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    steps: int = 0  # decode steps profiled (target forwards that were not a turn's prefill)
    forward_by_rows: dict[int, list[float]] = field(default_factory=dict)  # rows -> [forwards, seconds]

    def add_step(self, rows: int, seconds: float) -> None:
        """Count one decode step whose target forward over `rows` fed tokens took `seconds`."""
        entry = self.forward_by_rows.setdefault(rows, [0, 0.0])
        entry[0] += 1
        entry[1] += seconds
        self.steps += 1

    def per_step_us(self) -> dict[str, float]:
        """Microseconds per step in each phase (and their total)."""
        steps = max(self.steps, 1)
        out = {phase: 1e6 * s / steps for phase, s in self.seconds.items()}
        out["total"] = sum(out.values())
        return out

    def forward_us(self, max_rows: int = 9) -> dict[int, float]:
        """Mean microseconds of one forward by fed rows, for rows 1..max_rows that occurred."""
        return {rows: 1e6 * s / n for rows, (n, s) in sorted(self.forward_by_rows.items()) if rows <= max_rows and n}

    def __add__(self, other: StepProfile) -> StepProfile:
        rows = {k: list(v) for k, v in self.forward_by_rows.items()}
        for k, (n, s) in other.forward_by_rows.items():
            mine = rows.setdefault(k, [0, 0.0])
            mine[0] += n
            mine[1] += s
        return StepProfile(
            seconds={p: self.seconds.get(p, 0.0) + other.seconds.get(p, 0.0) for p in PHASES},
            steps=self.steps + other.steps,
            forward_by_rows=rows,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: raw seconds and counts, and the per-step view."""
        return {
            "steps": self.steps,
            "seconds": dict(self.seconds),
            "per_step_us": self.per_step_us(),
            "forward_by_rows": {
                str(rows): {"forwards": n, "seconds": s} for rows, (n, s) in sorted(self.forward_by_rows.items())
            },
        }


class PhaseClock:
    """Accumulates the wall time between laps into `into[phase]`; synchronises CUDA so GPU work lands in its phase.

    The decode loop keeps one for its coarse phases (a generation's `time_s`) and, when profiling, one
    for the fine ones (a StepProfile's `seconds`).
    """

    def __init__(self, device: torch.device, into: dict[str, float]) -> None:
        self.cuda = device.type == "cuda"
        self.into = into
        self.t = self._now()

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def lap(self, phase: str) -> float:
        """Charge the time since the last lap to `phase`; returns it."""
        now = self._now()
        dt = now - self.t
        self.into[phase] += dt
        self.t = now
        return dt


class NoClock:
    """The PhaseClock of an unprofiled generation: reads no clock, records nothing."""

    def lap(self, phase: str) -> float:
        """Nothing (0.0)."""
        return 0.0
