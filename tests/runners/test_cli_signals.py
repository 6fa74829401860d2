"""SIGTERM and Ctrl-C (SIGINT) sent to the real command lines while a task runs: a valid partial summary.

The first signal lets the task in flight finish: every task that started (has a trajectory) is in the
summary, none started after it. Two signals stop at once: the summary holds the tasks finished before.
The exit status is 128 + the signal (143 for SIGTERM, 130 for SIGINT). The exact placement of the
signals is tested in process (test_stop_and_resume.py); here it is the real delivery and exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 240  # seconds until the first task is under way (imports and model loading included)
END_TIMEOUT = 180  # seconds from the signal until the process has exited


def _start(module: str, tmp: Path, target: Path) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        module,
        f"model.target={target}",
        "model.draft=null",
        "task.split=dev",
        "task.limit=3",
        "agent.max_new_tokens=96",  # a few seconds per task: the signal lands inside one
        "agent.max_format_errors=3",
        f"run.root={tmp}",
        "run.name=cli",
        "run.progress=false",
        "run.warmup=false",
        "tracking.enabled=false",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _started(folder: Path, side: str = "*") -> set[str]:
    """Tasks with a trajectory on `side` (default either: the sides take turns going first, so either may be a
    task's first)."""
    return {p.stem for p in (folder / "trajectories").glob(f"{side}/r0/*.json")}


def _wait_for_tasks(proc: subprocess.Popen, folder: Path, count: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while len(_started(folder)) < count:
        if proc.poll() is not None:
            pytest.fail(f"the command ended before task {count} started: {proc.communicate()[1][-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"task {count} did not start within {START_TIMEOUT} s")
        time.sleep(0.05)


def _finish(proc: subprocess.Popen) -> str:
    try:
        _, err = proc.communicate(timeout=END_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"the command did not stop within {END_TIMEOUT} s of the signal")
    return err


def _send(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)


def test_sigterm_finishes_the_task_in_flight_and_writes_a_partial_summary(tiny_dir, tmp_path):
    folder = tmp_path / "cli"
    proc = _start("runners.run", tmp_path, tiny_dir)
    _wait_for_tasks(proc, folder, 1)
    _send(proc, signal.SIGTERM)
    err = _finish(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["partial"] is True and summary["interrupted"] == "SIGTERM"
    ids = {row["instance_id"] for row in summary["per_task"]}
    assert 1 <= len(ids) < 3
    assert ids == _started(folder, "baseline") == _started(folder, "candidate")  # in flight: finished, both sides
    assert summary["baseline"]["tasks"] == summary["candidate"]["tasks"] == len(ids)
    rows = [json.loads(line) for line in (folder / "repeats.jsonl").read_text().splitlines()]
    assert {r["instance_id"] for r in rows} == ids and len(rows) == 2 * len(ids)
    assert (folder / "hydra" / "config.yaml").is_file() and (folder / "hydra" / "overrides.yaml").is_file()
    assert "SIGTERM" in err and "Traceback" not in err


def test_ctrl_c_twice_stops_at_once_with_the_finished_tasks(tiny_dir, tmp_path):
    folder = tmp_path / "cli"
    proc = _start("runners.run", tmp_path, tiny_dir)
    _wait_for_tasks(proc, folder, 2)  # task 0 finished, task 1 under way
    _send(proc, signal.SIGINT)
    time.sleep(0.3)
    _send(proc, signal.SIGINT)
    err = _finish(proc)
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["partial"] is True and summary["interrupted"] == "SIGINT"
    ids = {row["instance_id"] for row in summary["per_task"]}
    assert 1 <= len(ids) < 3 and ids <= _started(folder)
    rows = [json.loads(line) for line in (folder / "repeats.jsonl").read_text().splitlines()]
    assert {r["instance_id"] for r in rows} == ids  # only finished tasks are recorded
    assert "Traceback" not in err


def test_eval_model_sigterm_writes_a_partial_eval(tiny_dir, tmp_path):
    folder = tmp_path / "cli"
    proc = _start("runners.eval_model", tmp_path, tiny_dir)
    _wait_for_tasks(proc, folder, 1)
    _send(proc, signal.SIGTERM)
    err = _finish(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    result = json.loads((folder / "eval.json").read_text())
    assert result["partial"] is True and result["interrupted"] == "SIGTERM"
    ids = {row["instance_id"] for row in result["per_task"]}
    assert 1 <= len(ids) < 3 and ids == _started(folder) and result["tasks"] == len(ids)
