"""Files a run leaves in runs/<name>/: summary, per-task rows, raw repeats, SWE-bench predictions.

`repeats.jsonl` is written as the run goes: each task's side runs are appended (one write) as soon
as the task is finished, so a killed run keeps them and `run.resume=true` can continue it; at the
end it is rewritten whole with the other files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agents.recording import Conversation
from common.errors import ConfigError
from common.files import write_atomic
from engine.stats import GenerationStats
from export.files import dumps_strict
from runners.outcomes import SIDES, SideRun, TaskOutcome

SUMMARY = "summary.json"
PER_TASK = "per_task.jsonl"
RAW = "repeats.jsonl"


def write_raw(out_dir: Path, outcomes: list[TaskOutcome]) -> None:
    """repeats.jsonl with exactly these outcomes' side runs (replacing what was there)."""
    write_atomic(out_dir / RAW, _raw_lines(outcomes))


def raw_row(run: SideRun) -> dict[str, Any]:
    """One line of repeats.jsonl: the side run with its token stream and final diff (all a resume needs)."""
    return {**run.to_dict(with_tokens=True), "patch": run.patch}


def _raw_lines(outcomes: list[TaskOutcome]) -> str:
    return "".join(
        json.dumps(raw_row(run), allow_nan=False) + "\n"
        for o in outcomes
        for run in (o.baseline, o.candidate)
        if run is not None
    )


def append_outcome(out_dir: Path, outcome: TaskOutcome) -> None:
    """Append a finished task's side runs to repeats.jsonl in one write, flushed to disk."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / RAW, "a") as handle:
        handle.write(_raw_lines([outcome]))
        handle.flush()
        os.fsync(handle.fileno())


def side_run_from_row(row: Any) -> SideRun | None:
    """The SideRun of a repeats.jsonl row, or None when the row lacks something a SideRun needs."""
    try:
        return SideRun(
            instance_id=str(row["instance_id"]),
            side=str(row["side"]),
            repeat=int(row["repeat"]),
            status=str(row["status"]),
            success=bool(row["success"]),
            evaluation_status=str(row["evaluation_status"]),
            time_s=float(row["time_s"]),
            evaluation_s=float(row["evaluation_s"]),
            steps=int(row["steps"]),
            message=str(row["message"]),
            patch=str(row["patch"]),
            max_context_tokens=int(row["max_context_tokens"]),
            stats=GenerationStats.from_dict(row["stats"]),
            generated_ids=[int(t) for t in row["generated_ids"]],
            trajectory=row.get("trajectory"),
            model_s=float(row.get("model_s", 0.0)),
            clocks={str(k): float(v) for k, v in (row.get("clocks") or {}).items()},
            conversation=Conversation.from_dict(row["conversation"]) if row.get("conversation") else None,
        )
    except (KeyError, TypeError, ValueError):
        return None


def read_raw_rows(path: Path) -> list[SideRun]:
    """The side runs recorded in a repeats.jsonl; a torn last line (killed mid-write) is skipped.

    Raises ValueError naming the file and line for a damaged line anywhere else.
    """
    if not path.is_file():
        return []
    lines = path.read_text(errors="replace").splitlines()
    runs = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                break  # the write in flight when the run was killed
            raise ConfigError(f"{path}:{number} is not valid JSON ({exc.msg})") from exc
        run = side_run_from_row(row)
        if run is not None:
            runs.append(run)
    return runs


def predictions_path(out_dir: Path, side: str) -> Path:
    """SWE-bench predictions file of one side."""
    return out_dir / f"predictions-{side}.jsonl"


def write_outputs(out_dir: Path, summary: dict[str, Any], outcomes: list[TaskOutcome], model_name: str) -> list[Path]:
    """Write every output file; returns their paths (summary first)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / SUMMARY, out_dir / PER_TASK, out_dir / RAW]
    write_atomic(paths[0], dumps_strict(summary))
    write_atomic(paths[1], "".join(json.dumps(row, allow_nan=False) + "\n" for row in summary["per_task"]))
    write_atomic(paths[2], _raw_lines(outcomes))
    for side in SIDES:
        runs = [getattr(o, side) for o in outcomes if o.repeat == 0 and getattr(o, side) is not None]
        if not runs:
            continue
        lines = [
            json.dumps(
                {"instance_id": r.instance_id, "model_name_or_path": f"{model_name}:{side}", "model_patch": r.patch}
            )
            + "\n"
            for r in runs
        ]
        path = predictions_path(out_dir, side)
        write_atomic(path, "".join(lines))
        paths.append(path)
    return paths
