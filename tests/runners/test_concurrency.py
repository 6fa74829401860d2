"""Several agents at once on the built-in engine: the runner's waves, their accounting, and a stop mid-wave.

The bundled model solves swe-lite's dev tasks within a few turns, so three agents at once really overlap
(their turns share the scheduler's batches). Checked: every task ran once per side, the per-task runs add up
to what the engine's scheduler served, OFF and ON emit the same greedy streams at the same N, the summary
carries the concurrency block; and a run stopped by two SIGTERMs in the middle of a wave leaves no process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from runners.concurrency import Wave, run_wave
from runners.outcomes import SideRun
from runners.run import execute
from tests.runners.test_runner_killed import ROOT, _alive, _leftovers, _wait_for_a_command

DEV3 = ("task.split=dev", "task.limit=3", "run.threads=1", "tracking.enabled=false")  # three tasks, quiet


def test_three_agents_at_once_add_up(runner_cfg, tmp_path):
    summary = execute(runner_cfg(*DEV3, "engine=ngram", "run.concurrency=3", "run.warmup=false", "run.name=c3"))
    block = summary["concurrency"]
    assert block["agents"] == 3
    assert sorted((w["side"], w["tasks"]) for w in block["waves"]) == [("baseline", 3), ("candidate", 3)]
    assert block["throughput_ratio"] is not None and len(block["throughput_ratio_repeats"]) == 1
    for side in ("baseline", "candidate"):
        assert summary[side]["tasks"] == 3
        served = summary["backend"][side]["served"]
        # every task run's tokens came from this side's scheduler, and some of its steps batched agents together
        assert served["tokens"] == summary[side]["new_tokens"]
        assert served["max_batch"] > 1 and served["steps"] > 0
        rows = (tmp_path / "c3" / "repeats.jsonl").read_text().splitlines()
        runs = [json.loads(line) for line in rows if json.loads(line)["side"] == side]
        assert sum(r["stats"]["new_tokens"] for r in runs) == summary[side]["new_tokens"]
        latency = block["sides"][side]["latency_s"]
        assert latency["p50"] is not None and latency["p50"] <= latency["p99"]
    assert summary["diverged_tasks"] == []  # exact acceptance: ON's streams are OFF's, batch for batch


def test_two_sigterms_mid_wave_stop_every_agent(tmp_path):
    cmd = [
        sys.executable, "-m", "runners.run", "task.split=dev", "task.limit=4", "run.concurrency=2",
        f"run.root={tmp_path}", "run.name=killed", "run.progress=false", "run.warmup=false",
        "tracking.enabled=false", "run.threads=1",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        tree = _wait_for_a_command(proc, "local")
        proc.send_signal(signal.SIGTERM)  # the first asks for a stop after the wave in flight
        proc.send_signal(signal.SIGTERM)  # the second stops the agents at their next model call
        _, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    summary = json.loads((tmp_path / "killed" / "summary.json").read_text())
    assert summary["partial"] is True and summary["interrupted"] == "SIGTERM"
    assert _alive(tree) == set(), "processes the runner started outlived it"
    assert _leftovers(f"{proc.pid}.") == []


def test_eval_model_with_two_agents_reports_their_throughput(runner_cfg, tmp_path):
    from runners.eval_model import evaluate_model

    result = evaluate_model(runner_cfg(*DEV3, "run.concurrency=2", "run.warmup=false", "run.name=ev2"))
    block = result["concurrency"]
    assert block["agents"] == 2 and [w["side"] for w in block["waves"]] == ["baseline"]
    assert block["waves"][0]["tasks"] == 3 and block["sides"]["baseline"]["correct_tasks_per_minute"] > 0
    assert json.loads((tmp_path / "ev2" / "eval.json").read_text())["concurrency"]["agents"] == 2


def _run(iid: str) -> SideRun:
    return SideRun(iid, "baseline", 0, "submitted", True, "resolved", 1.0, 0.1)


def test_a_wave_reports_each_episode_and_an_error_stops_the_others():
    seen: list[tuple[str, int, int]] = []
    wave = run_wave(
        Wave("baseline", 0, 2),
        ["a", "b", "c"],
        _run,
        threading.Event(),
        lambda w, run, finished, total: seen.append((run.instance_id, finished, total)),
    )
    assert [r.instance_id for r in wave.runs] == ["a", "b", "c"] and wave.wall_s > 0
    assert sorted(f for _, f, _ in seen) == [1, 2, 3] and {t for _, _, t in seen} == {3}

    abort = threading.Event()

    def broken(iid: str) -> SideRun:
        if iid == "b":
            raise RuntimeError("boom")
        return _run(iid)

    with pytest.raises(RuntimeError, match="boom"):
        run_wave(Wave("candidate", 0, 2), ["a", "b", "c"], broken, abort)
    assert abort.is_set()  # the other agents stop at their next model call
