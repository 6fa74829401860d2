"""The study's speculation-OFF baseline: measured once (trial 0), kept in baseline.json, reused on resume.

baseline.json holds every OFF task run (token streams and diffs included, as repeats.jsonl rows), so a
resumed study rebuilds the exact `Baseline` every candidate is compared with instead of re-measuring
it. The end-of-study re-measurement ("drift") is appended under `drift`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.compare import Baseline
from runners.outcomes import SideRun, TaskOutcome
from runners.outputs import dumps_strict, raw_row, side_run_from_row, write_atomic
from runners.summary import side_summary

BASELINE_FILE = "baseline.json"


@dataclass
class BaselineRecord:
    """OFF runs of the search tasks with the figures every trial needs from them."""

    runs: list[SideRun]
    repeats: int
    instance_ids: list[str]  # the study's (shuffled) task order
    trial_number: int | None = None  # the Optuna trial that measured it
    drift: dict[str, Any] | None = None  # the end-of-study re-measurement, when done
    summary: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.summary = side_summary(self.runs, self.repeats)

    @property
    def baseline(self) -> Baseline:
        """The runner's `Baseline` for `Comparison(baseline=...)`."""
        return Baseline({(r.instance_id, r.repeat): r for r in self.runs})

    @property
    def needed_context(self) -> int:
        """The largest context (prompt + reply tokens) any OFF task run needed."""
        return max((r.max_context_tokens for r in self.runs), default=0)

    @property
    def agent_time_s(self) -> float:
        """Agent wall time of all OFF task runs (the drift compares this)."""
        return sum(r.time_s for r in self.runs)

    def save(self, study_dir: Path) -> Path:
        """Write baseline.json atomically; returns its path."""
        path = study_dir / BASELINE_FILE
        data = {
            "repeats": self.repeats,
            "instance_ids": self.instance_ids,
            "trial_number": self.trial_number,
            "summary": {k: v for k, v in self.summary.items() if k != "per_position"},
            "drift": self.drift,
            "runs": [raw_row(r) for r in self.runs],
        }
        write_atomic(path, dumps_strict(data))
        return path


def load_baseline(study_dir: Path) -> BaselineRecord | None:
    """The stored baseline, or None when the study has none yet; a damaged file names itself."""
    path = study_dir / BASELINE_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        runs = [side_run_from_row(row) for row in data["runs"]]
        if any(r is None for r in runs):
            raise ValueError("a run row lacks fields")
        return BaselineRecord(
            runs=runs,  # type: ignore[arg-type]
            repeats=int(data["repeats"]),
            instance_ids=list(data["instance_ids"]),
            trial_number=data.get("trial_number"),
            drift=data.get("drift"),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a spectune baseline ({exc}); delete it to re-measure OFF") from exc


def record_from_outcomes(
    outcomes: list[TaskOutcome], repeats: int, instance_ids: list[str], trial_number: int | None
) -> BaselineRecord:
    """A BaselineRecord from the OFF side of finished outcomes."""
    runs = [o.baseline for o in sorted(outcomes, key=lambda o: (o.repeat, o.index)) if o.baseline is not None]
    return BaselineRecord(runs, repeats, instance_ids, trial_number)


def drift(start: BaselineRecord, end_runs: list[SideRun]) -> dict[str, Any]:
    """How much OFF changed between the study's start and end (positive: the machine got slower)."""
    end = side_summary(end_runs, start.repeats)
    end_time = sum(r.time_s for r in end_runs)
    a, b = start.summary["seconds_per_success"], end["seconds_per_success"]
    return {
        "agent_time_s": {"start": start.agent_time_s, "end": end_time},
        "agent_time_pct": 100.0 * (end_time / start.agent_time_s - 1.0) if start.agent_time_s else None,
        "seconds_per_success": {"start": a, "end": b},
        "seconds_per_success_pct": 100.0 * (b / a - 1.0) if a and b else None,
        "successes": {"start": start.summary["successes"], "end": end["successes"]},
    }
