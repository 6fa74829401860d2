"""Confirmation: the best configuration against a fresh, live OFF on held-out tasks, with spread.

The search estimate is optimistic (it is the minimum over trials, on the tasks it was chosen on), so
the numbers the export carries come from here: a new `Comparison` on `tuner.confirm_split`, OFF and
ON interleaved, `tuner.confirm_repeats` repeats. Spread: the speedup of every repeat, and a bootstrap
interval over tasks (scipy's BCa, tasks resampled with their repeats, pooled seconds per success).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from runners.compare import Comparison
from runners.outcomes import TaskOutcome
from runners.summary import summarize


def per_repeat_speedups(summary: dict[str, Any]) -> list[float | None]:
    """OFF ÷ ON seconds per success of each repeat (None where a side had no success)."""
    off = summary["baseline"]["seconds_per_success_repeats"]
    on = summary["candidate"]["seconds_per_success_repeats"]
    return [a / b if a and b else None for a, b in zip(off, on, strict=False)]


def _pooled_speedup(off_t, off_s, on_t, on_s, axis=-1):
    """Pooled OFF seconds per success ÷ pooled ON seconds per success (vectorised over resamples)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.sum(off_t, axis) / np.sum(off_s, axis)) / (np.sum(on_t, axis) / np.sum(on_s, axis))


def speedup_interval(
    outcomes: list[TaskOutcome], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Pooled speedup over tasks and its bootstrap interval (tasks resampled, their repeats kept together)."""
    tasks: dict[str, list[float]] = {}
    for o in outcomes:
        if o.baseline is None or o.candidate is None:
            continue
        row = tasks.setdefault(o.instance_id, [0.0, 0.0, 0.0, 0.0])
        row[0] += o.baseline.time_s
        row[1] += o.baseline.success
        row[2] += o.candidate.time_s
        row[3] += o.candidate.success
    data = np.array(list(tasks.values()), dtype=float).T if tasks else np.zeros((4, 0))
    point = float(_pooled_speedup(*data)) if data.shape[1] else float("nan")
    out: dict[str, Any] = {"pooled": point if np.isfinite(point) else None, "low": None, "high": None}
    out.update(confidence=confidence, tasks=int(data.shape[1]), method="bca")
    if data.shape[1] < 3 or not np.isfinite(point):
        out["note"] = "too few tasks with successes on both sides for an interval"
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples (a side without success) become nan
        result = stats.bootstrap(
            tuple(data),
            _pooled_speedup,
            paired=True,
            vectorized=True,
            confidence_level=confidence,
            n_resamples=resamples,
            method="BCa",
            random_state=np.random.default_rng(seed),
        )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    out["low"] = low if np.isfinite(low) else None
    out["high"] = high if np.isfinite(high) else None
    return out


def confirm(comparison: Comparison, stream, *, resamples: int, seed: int) -> dict[str, Any]:
    """Run the confirmation comparison (`stream` yields its outcomes, stoppable) and summarise it."""
    outcomes = list(stream)
    summary = summarize(
        sorted(outcomes, key=lambda o: (o.repeat, o.index)),
        repeats=comparison.repeats,
        lossy=comparison.lossy,
        greedy=comparison.greedy,
        unsupported=comparison.unsupported,
    )
    interval = speedup_interval(outcomes, resamples=resamples, seed=seed)
    return {
        "complete": len(outcomes) == len(comparison.instances) * comparison.repeats,
        "tasks": len(comparison.instances),
        "repeats": comparison.repeats,
        "task_runs": len(outcomes),
        "speedup": summary["speedup"],
        "speedup_repeats": per_repeat_speedups(summary),
        "speedup_interval": interval,
        "regressions": summary["regressions"],
        "improvements": summary["improvements"],
        "diverged_tasks": summary["diverged_tasks"],
        "lossy": summary["lossy"],
        "seconds_per_success": {s: summary[s]["seconds_per_success"] for s in ("baseline", "candidate")},
        "success_rate": {s: summary[s]["success_rate"] for s in ("baseline", "candidate")},
        "acceptance_rate": summary["candidate"]["acceptance_rate"],
        "mean_accepted_length": summary["candidate"]["mean_accepted_length"],
        "acceptance_by_position": (summary["candidate"]["per_position"] or {}).get("acceptance", []),
        "decode_tokens_per_s": {s: summary[s]["decode_tokens_per_s"] for s in ("baseline", "candidate")},
        "instance_ids": [i.instance_id for i in comparison.instances],
        "out_dir": str(Path(comparison.out_dir)),
    }
