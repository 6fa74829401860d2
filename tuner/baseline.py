"""The study's recording: speculation OFF run live once (trial 0), its agent conversations kept in baseline.json.

baseline.json holds every OFF task run with its conversation (every turn's prompt and reply), token stream,
diff, agent time and generation time, so candidate trials replay exactly these turns (runners/replay.py) and
a resumed study reuses them instead of recording again. Its seconds per success is the study's reference:
a trial's objective value is this reference divided by the trial's own paired speedup (tuner/objective.py),
so no trial is ever compared with this OFF's timing directly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from common.files import write_atomic
from runners.outcomes import SideRun, TaskOutcome
from runners.outputs import dumps_strict, raw_row, side_run_from_row
from runners.summary import side_summary

BASELINE_FILE = "baseline.json"


@dataclass
class BaselineRecord:
    """OFF runs of the search tasks with the figures every trial needs from them."""

    runs: list[SideRun]
    repeats: int
    instance_ids: list[str]  # the study's (shuffled) task order
    trial_number: int | None = None  # the Optuna trial that measured it
    host: str | None = None  # the machine it was recorded on
    summary: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.summary = side_summary(self.runs, self.repeats)

    @property
    def recording(self) -> dict[tuple[str, int], SideRun]:
        """The recorded runs by (instance_id, repeat), what `ReplayComparison` replays."""
        return {(r.instance_id, r.repeat): r for r in self.runs}

    @property
    def replayable(self) -> bool:
        """Every run kept its conversation."""
        return all(r.conversation is not None for r in self.runs)

    @property
    def needed_context(self) -> int:
        """The largest context (prompt + reply tokens) any OFF task run needed."""
        return max((r.max_context_tokens for r in self.runs), default=0)

    @property
    def agent_time_s(self) -> float:
        """Agent wall time of all OFF task runs (the drift compares this)."""
        return sum(r.time_s for r in self.runs)

    def to_json(self) -> str:
        """The record as baseline.json holds it (what the study's storage also carries, tuner/recording.py)."""
        data = {
            "repeats": self.repeats,
            "instance_ids": self.instance_ids,
            "trial_number": self.trial_number,
            "host": self.host,
            "summary": {k: v for k, v in self.summary.items() if k != "per_position"},
            "runs": [raw_row(r) for r in self.runs],
        }
        return dumps_strict(data)

    def save(self, study_dir: Path) -> Path:
        """Write baseline.json atomically; returns its path."""
        path = study_dir / BASELINE_FILE
        write_atomic(path, self.to_json())
        return path


def load_baseline(study_dir: Path) -> BaselineRecord | None:
    """The stored baseline, or None when the study has none yet; a damaged file names itself."""
    path = study_dir / BASELINE_FILE
    if not path.is_file():
        return None
    try:
        return record_from_json(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a spectune baseline ({exc}); delete it to re-measure OFF") from exc


def record_from_json(text: str) -> BaselineRecord:
    """A BaselineRecord from what `to_json` wrote; ValueError saying what is wrong otherwise."""
    try:
        data = json.loads(text)
        runs = [side_run_from_row(row) for row in data["runs"]]
        if any(r is None for r in runs):
            raise ValueError("a run row lacks fields")
        return BaselineRecord(
            runs=runs,  # type: ignore[arg-type]
            repeats=int(data["repeats"]),
            instance_ids=list(data["instance_ids"]),
            trial_number=data.get("trial_number"),
            host=data.get("host"),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}") from exc


def record_from_outcomes(
    outcomes: list[TaskOutcome], repeats: int, instance_ids: list[str], trial_number: int | None, host: str | None
) -> BaselineRecord:
    """A BaselineRecord from the OFF side of finished outcomes."""
    runs = [o.baseline for o in sorted(outcomes, key=lambda o: (o.repeat, o.index)) if o.baseline is not None]
    return BaselineRecord(runs, repeats, instance_ids, trial_number, host)
