"""Aggregate per-task outcomes into the run summary (the numbers summary.json, the table and MLflow show).

Definitions (docs/runner.md, "What it measures"):
- a task run is a *success* when the agent submitted and the evaluation resolved its diff;
- `seconds_per_success` of one repeat = agent wall time of all its tasks (generation + tool commands,
  evaluation excluded) / its successes; the run's value is the median over repeats (a repeat with no
  success counts as infinitely slow; null when that is the median);
- `tasks` and `successes` count task runs (tasks x repeats); a task is *solved* by a side when it
  succeeded in more than half of the repeats, and regressions / improvements compare that per task.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

from engine.stats import GenerationStats
from runners.outcomes import SIDES, SideRun, TaskOutcome

SIDE_KEYS = (
    "seconds_per_success",
    "seconds_per_success_repeats",
    "successes_per_minute",
    "success_rate",
    "successes",
    "tasks",
    "acceptance_rate",
    "mean_accepted_length",
    "decode_tokens_per_s",
    "new_tokens",
    "prompt_tokens",
    "reused_tokens",
    "prefilled_tokens",
    "draft_limit_steps",
    "peak_memory_bytes",
    "context_exceeded",
    "max_context_tokens",
    "agent_time_s",
    "evaluation_s",
    "time_s",
    "per_position",
    "statuses",
    "unsupported",
)


def finite(x: float | None) -> float | None:
    """x, or None for inf/nan (summary.json must be strict JSON)."""
    return None if x is None or math.isinf(x) or math.isnan(x) else x


def _median_or_none(values: list[float | None]) -> float | None:
    if not values:
        return None
    return finite(statistics.median(math.inf if v is None else v for v in values))


def side_summary(runs: list[SideRun], repeats: int, unsupported: str | None = None) -> dict[str, Any]:
    """The summary block of one side (baseline or candidate)."""
    if unsupported is not None or not runs:
        out: dict[str, Any] = dict.fromkeys(SIDE_KEYS)
        out.update(successes=0, tasks=0, seconds_per_success_repeats=[], unsupported=unsupported)
        return out
    stats = sum((r.stats for r in runs), GenerationStats())
    per_repeat: list[float | None] = []
    for rep in range(repeats):
        mine = [r for r in runs if r.repeat == rep]
        if not mine:
            continue
        wins = sum(r.success for r in mine)
        per_repeat.append(sum(r.time_s for r in mine) / wins if wins else None)
    agent_time = sum(r.time_s for r in runs)
    successes = sum(r.success for r in runs)
    decode_time = sum(stats.time_s.values()) - stats.time_s.get("prefill", 0.0)
    statuses: dict[str, int] = {}
    for r in runs:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    drafted, accepted = stats.drafted_per_position, stats.accepted_per_position
    # The engine's lists end at their last non-zero count; pad both to one length (position i in both).
    width = max(len(drafted), len(accepted))
    drafted = list(drafted) + [0] * (width - len(drafted))
    accepted = list(accepted) + [0] * (width - len(accepted))
    return {
        "seconds_per_success": _median_or_none(per_repeat),
        "seconds_per_success_repeats": [finite(v) for v in per_repeat],
        "successes_per_minute": successes / (agent_time / 60.0) if agent_time > 0 else None,
        "success_rate": successes / len(runs),
        "successes": successes,
        "tasks": len(runs),
        "acceptance_rate": stats.acceptance_rate,
        "mean_accepted_length": stats.mean_accepted_length,
        "decode_tokens_per_s": finite(stats.new_tokens / decode_time) if decode_time > 0 else None,
        "new_tokens": stats.new_tokens,
        "prompt_tokens": stats.prompt_tokens,
        "reused_tokens": stats.reused_tokens,
        "prefilled_tokens": stats.prefilled_tokens,
        "draft_limit_steps": stats.draft_limit_steps,  # steps not drafted: the draft model's context was full
        "peak_memory_bytes": stats.peak_memory_bytes,
        "context_exceeded": statuses.get("context_exceeded", 0),
        "max_context_tokens": max(r.max_context_tokens for r in runs),
        "agent_time_s": agent_time,
        "evaluation_s": sum(r.evaluation_s for r in runs),
        "time_s": dict(stats.time_s),
        "per_position": {
            "drafted": list(drafted),
            "accepted": list(accepted),
            "acceptance": [a / d if d else 0.0 for a, d in zip(accepted, drafted, strict=False)],
        },
        "statuses": statuses,
        "unsupported": None,
    }


def _solved(runs: list[SideRun]) -> bool:
    return sum(r.success for r in runs) * 2 > len(runs)


def _task_side(runs: list[SideRun]) -> dict[str, Any]:
    return {
        "times": [r.time_s for r in runs],
        "successes": [r.success for r in runs],
        "statuses": [r.status for r in runs],
        "evaluation": [r.evaluation_status for r in runs],
        "median_time_s": statistics.median(r.time_s for r in runs) if runs else None,
    }


def per_task(outcomes: Iterable[TaskOutcome], greedy: bool) -> list[dict[str, Any]]:
    """One entry per task: per-repeat times, successes and statuses of both sides, first divergence."""
    by_task: dict[str, list[TaskOutcome]] = {}
    for o in outcomes:
        by_task.setdefault(o.instance_id, []).append(o)
    rows = []
    for iid, items in by_task.items():
        items.sort(key=lambda o: o.repeat)
        base = [o.baseline for o in items if o.baseline is not None]
        cand = [o.candidate for o in items if o.candidate is not None]
        divergences = [o.first_divergence for o in items] if greedy and base and cand else []
        diverged = [d for d in divergences if d is not None]
        rows.append(
            {
                "instance_id": iid,
                "baseline": _task_side(base),
                "candidate": _task_side(cand),
                "solved": {"baseline": _solved(base) if base else None, "candidate": _solved(cand) if cand else None},
                # Greedy only: where the ON stream first left the OFF stream (min over repeats).
                "first_divergence": min(diverged) if diverged else None,
            }
        )
    return rows


def summarize(
    outcomes: list[TaskOutcome],
    *,
    repeats: int,
    lossy: bool,
    greedy: bool,
    unsupported: str | None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The run summary: both sides, quality comparison, per-task rows (+ `extra` top-level keys)."""
    sides = {
        "baseline": side_summary([o.baseline for o in outcomes if o.baseline is not None], repeats),
        "candidate": side_summary([o.candidate for o in outcomes if o.candidate is not None], repeats, unsupported),
    }
    rows = per_task(outcomes, greedy)
    comparable = [r for r in rows if r["solved"]["baseline"] is not None and r["solved"]["candidate"] is not None]
    summary: dict[str, Any] = {
        **sides,
        "regressions": [
            r["instance_id"] for r in comparable if r["solved"]["baseline"] and not r["solved"]["candidate"]
        ],
        "improvements": [
            r["instance_id"] for r in comparable if r["solved"]["candidate"] and not r["solved"]["baseline"]
        ],
        "diverged_tasks": [r["instance_id"] for r in rows if r["first_divergence"] is not None],
        "speedup": _speedup(sides),
        "cost_ratios": cost_ratios(
            [o.candidate for o in outcomes if o.candidate is not None],
            [o.baseline for o in outcomes if o.baseline is not None],
        ),
        "lossy": lossy,
        "greedy": greedy,
        "repeats": repeats,
        "per_task": rows,
    }
    summary.update(extra or {})
    assert set(SIDES) <= summary.keys()
    return summary


def cost_ratios(candidate: list[SideRun], baseline: list[SideRun]) -> dict[str, float | None]:
    """R = one verify forward ÷ one plain step (OFF's), C = drafting time ÷ verify time, from the engine's timers.

    On llama-server (no drafting time apart) R is a whole ON step, drafting included, and C is None.

    Measured inside the agent's episodes (real contexts, real draft lengths), so they describe this run;
    `python -m bench engine` gives the controlled profile (R_k for each k, t_1).
    """
    cand = sum((r.stats for r in candidate), GenerationStats())
    base = sum((r.stats for r in baseline), GenerationStats())

    def per_step(stats: GenerationStats) -> float | None:
        steps = stats.emitting_forwards
        return stats.time_s.get("verify", 0.0) / steps if steps else None

    verify, step = per_step(cand), per_step(base)
    # llama-server reports generation time as one figure: its drafting is inside "verify", so no C apart
    timed_apart = cand.time_s.get("draft", 0.0) > 0 or not cand.drafted
    return {
        "verify_over_step": verify / step if verify and step else None,
        "draft_over_verify": cand.time_s.get("draft", 0.0) / cand.time_s["verify"]
        if cand.time_s.get("verify") and timed_apart
        else None,
    }


def _speedup(sides: dict[str, dict[str, Any]]) -> float | None:
    """OFF seconds per success / ON seconds per success (> 1: speculation finishes tasks faster)."""
    off, on = sides["baseline"]["seconds_per_success"], sides["candidate"]["seconds_per_success"]
    return off / on if off and on else None
