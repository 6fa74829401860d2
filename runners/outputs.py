"""Files a run leaves in runs/<name>/: summary, per-task rows, raw repeats, SWE-bench predictions."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from runners.outcomes import SIDES, TaskOutcome

SUMMARY = "summary.json"
PER_TASK = "per_task.jsonl"
RAW = "repeats.jsonl"


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file and rename, so an interrupted run never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def dumps_strict(data: Any) -> str:
    """JSON that any parser accepts: NaN/Infinity raise instead of being written."""
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def predictions_path(out_dir: Path, side: str) -> Path:
    """SWE-bench predictions file of one side."""
    return out_dir / f"predictions-{side}.jsonl"


def write_outputs(out_dir: Path, summary: dict[str, Any], outcomes: list[TaskOutcome], model_name: str) -> list[Path]:
    """Write every output file; returns their paths (summary first)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / SUMMARY, out_dir / PER_TASK, out_dir / RAW]
    write_atomic(paths[0], dumps_strict(summary))
    write_atomic(paths[1], "".join(json.dumps(row, allow_nan=False) + "\n" for row in summary["per_task"]))
    raw = []
    for o in outcomes:
        for run in (o.baseline, o.candidate):
            if run is not None:
                raw.append(json.dumps(run.to_dict(with_tokens=True), allow_nan=False) + "\n")
    write_atomic(paths[2], "".join(raw))
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
