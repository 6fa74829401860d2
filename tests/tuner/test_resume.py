"""A killed study resumes (sqlite and journal): no completed trial lost, the killed one retried, OFF not
re-measured; two processes share one journal file. Real `python -m tuner.search` processes, SIGKILLed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tuner.conftest import PROJECT, SMALL

# Runs the real entry point; trial HANG, once its parameters are drawn, hangs while FLAG exists after touching
# MARKER (so the test can kill it mid-trial).
WRAPPER = """
import os, sys, time
import tuner.objective as objective
hang, flag, marker = int(os.environ["HANG"]), os.environ["FLAG"], os.environ["MARKER"]
original = objective.suggest

def suggest(trial, space, base):
    config = original(trial, space, base)
    if trial.number == hang and os.path.exists(flag):
        open(marker, "w").close()
        while os.path.exists(flag):
            time.sleep(0.1)
    return config

objective.suggest = suggest
from tuner.search import main
main()
"""


def _start(tmp_path: Path, *overrides: str, hang: int = -1) -> subprocess.Popen:
    script = tmp_path / "wrapper.py"
    script.write_text(WRAPPER)
    env = {
        **os.environ,
        "HANG": str(hang),
        "FLAG": str(tmp_path / "hang.flag"),
        "MARKER": str(tmp_path / "hanging"),
        "PYTHONPATH": str(PROJECT),
    }
    args = [*SMALL, f"run.root={tmp_path / 'runs'}", "study.name=k", *overrides]
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the kill reaches every child
    )


def _wait_for(path: Path, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 300
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.2)


def _finish(proc: subprocess.Popen, timeout: float = 300, code: int = 0) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == code, out
    return " ".join(out.split())  # rich wraps lines at the terminal width


def _rows(tmp_path: Path) -> list[dict]:
    path = tmp_path / "runs" / "k" / "trials.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_a_study_killed_mid_trial_resumes_keeping_every_completed_trial(tmp_path, storage):
    (tmp_path / "hang.flag").touch()
    proc = _start(tmp_path, "tuner.trials=3", f"study.storage={storage}", hang=2)
    try:
        _wait_for(tmp_path / "hanging", proc, "trial 2")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # mid-trial, no chance to clean up
        proc.wait()
    before = {r["number"]: r for r in _rows(tmp_path)}
    assert sorted(before) == [0, 1] and all(r["state"] == "COMPLETE" for r in before.values())
    baseline = (tmp_path / "runs" / "k" / "baseline.json").read_text()

    (tmp_path / "hang.flag").unlink()
    out = _finish(_start(tmp_path, "tuner.trials=3", f"study.storage={storage}"))
    assert "retrying trial(s) [2]" in out and "recording reused" in out
    after = {r["number"]: r for r in _rows(tmp_path)}
    for number, row in before.items():  # nothing completed was lost or redone, its paired figures kept
        assert after[number]["value"] == row["value"] and after[number]["state"] == "COMPLETE"
        for key in ("speedup", "off_seconds_per_success", "task_values"):
            assert after[number]["user_attrs"].get(key) == row["user_attrs"].get(key)
    assert after[2]["state"] == "FAIL" and after[2]["reason"] == "killed"
    assert after[2]["params"]  # killed after its parameters were drawn
    [retry] = [r for r in after.values() if r["number"] > 2 and r["params"] == after[2]["params"]]
    assert retry["state"] == "COMPLETE"
    assert [r["role"] for r in after.values()].count("baseline") == 1
    assert (tmp_path / "runs" / "k" / "baseline.json").read_text() == baseline  # OFF not re-measured
    counted = [r for r in after.values() if r["role"] == "candidate" and r["state"] == "COMPLETE"]
    assert len(counted) == 3


def test_two_workers_on_one_journal_draw_different_parameters_and_finish_once(tmp_path):
    common = (
        "tuner.trials=4",
        "study.storage=journal",
        "tuner.confirm=true",
        "tuner.confirm_limit=3",
        "tuner.confirm_repeats=1",
    )
    (tmp_path / "hang.flag").touch()
    first = _start(tmp_path, *common, hang=1)  # records OFF, then holds its first candidate (trial 1) running
    try:
        _wait_for(tmp_path / "hanging", first, "trial 1")
        second = _start(tmp_path, *common)  # samples while trial 1 runs elsewhere, measures the rest
        outputs = [_finish(second)]
        (tmp_path / "hang.flag").unlink()
        outputs.append(_finish(first))
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    rows = _rows(tmp_path)
    numbers = [r["number"] for r in rows]
    assert len(numbers) == len(set(numbers))
    candidates = [r for r in rows if r["role"] == "candidate"]
    owners = {r["user_attrs"]["owner"].split(".")[0] for r in candidates}
    assert len(owners) == 2, owners  # both processes ran candidates
    measured = [r for r in candidates if r["state"] == "COMPLETE" and not r["user_attrs"].get("reused")]
    keys = [json.dumps(r["params"], sort_keys=True) for r in measured]
    assert len(keys) == len(set(keys)), keys  # no parameter set measured twice, in parallel or not
    assert len(measured) == 5  # the budget, plus the one the first process held while the second spent it
    for row in measured:  # each worker paired its trials with an OFF it measured itself
        assert row["user_attrs"]["off_seconds_per_success"] > 0 and row["user_attrs"]["measure"] == "replay"
    # One finish for the whole study: the last worker confirmed and exported; the other said so and left.
    assert "confirms and exports" in outputs[0] and "exports:" not in outputs[0]
    assert "exports:" in outputs[1]
    summary = json.loads((tmp_path / "runs" / "k" / "summary.json").read_text())
    confirmed = {int(n) for n in summary["confirmations"]}
    assert {w["trial"] for w in summary["winners"].values() if w["trial"] is not None} == confirmed
    assert (tmp_path / "runs" / "k" / "best" / "README.md").is_file()


def test_ctrl_c_finishes_the_task_records_the_trial_and_the_rerun_completes_it(tmp_path):
    (tmp_path / "hang.flag").touch()
    proc = _start(tmp_path, "tuner.trials=3", hang=2)
    try:
        _wait_for(tmp_path / "hanging", proc, "trial 2")
        os.kill(proc.pid, signal.SIGINT)  # the tuner process only, as a terminal's Ctrl-C would reach it first
        (tmp_path / "hang.flag").unlink()  # trial 2 goes on to its task loop, which starts no task after a stop
        out = _finish(proc, code=130)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "rerun the same command to resume" in out
    rows = {r["number"]: r for r in _rows(tmp_path)}
    assert rows[2]["state"] == "FAIL" and rows[2]["reason"] == "interrupted" and rows[2]["params"]
    assert rows[2]["user_attrs"]["tasks_run"] == 0  # the stop came before its first task: none started
    summary = json.loads((tmp_path / "runs" / "k" / "summary.json").read_text())
    assert summary["partial"] and summary["interrupted"] == "SIGINT"

    out = _finish(_start(tmp_path, "tuner.trials=3"))
    assert "re-queued interrupted trial(s) [2]" in out
    after = {r["number"]: r for r in _rows(tmp_path)}
    [again] = [r for r in after.values() if r["user_attrs"].get("retry_of") == 2]
    assert again["state"] == "COMPLETE" and again["params"] == rows[2]["params"]
    assert sum(r["role"] == "candidate" and r["state"] == "COMPLETE" for r in after.values()) == 3
