"""The model evaluation command end to end on real swe-lite tasks with a tiny random model, and its breakdown.

A random model solves nothing, so what is checked is the accounting (statuses, families and difficulties
add up to the task runs), plain decoding whatever the engine group says, and the files it writes.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agents.loop import STATUSES
from engine.tiny import make_tiny_model
from runners.eval_model import CONFIG_NAME, breakdown, evaluate_model
from runners.outcomes import SideRun
from tasks.schema import Instance
from tasks.suites import verify_swe_lite
from tests.conftest import compose_config, runner_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eval")
    target = make_tiny_model(tmp / "target", layers=1, hidden=64, seed=3)
    cfg = runner_config(
        tmp,
        f"model.target={target}",
        "model.draft=null",
        "task.split=dev",
        "task.limit=2",
        "engine=ngram",  # ignored: eval_model always decodes plainly
        "run.seed=5",
        "agent.max_new_tokens=16",
        "agent.max_format_errors=1",
        "run.name=ev",
        f"tracking.uri=sqlite:///{tmp}/mlflow.db",
    )
    return tmp / "ev", evaluate_model(cfg)


def test_two_tasks_counted_and_written(evaluated):
    out, result = evaluated
    assert json.loads((out / "eval.json").read_text()) == json.loads(json.dumps(result))  # strict JSON on disk
    assert (result["tasks"], result["successes"], result["success_rate"]) == (2, 0, 0.0)
    assert set(result["statuses"]) == set(STATUSES) and sum(result["statuses"].values()) == 2
    assert result["statuses"]["format_errors"] == 2  # junk text: one malformed turn ends each task
    assert result["evaluation_statuses"] == {"not_submitted": 2}
    assert result["task"]["content_hash"] == verify_swe_lite()["content_hash"]
    assert result["mean_steps"] == 1.0
    for key in ("by_family", "by_difficulty"):
        assert sum(row["tasks"] for row in result[key].values()) == 2
    assert {r["family"] for r in result["per_task"]} == set(result["by_family"])
    predictions = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [p["instance_id"] for p in predictions] == [r["instance_id"] for r in result["per_task"]]
    assert len(list((out / "trajectories").rglob("*.json"))) == 2


def test_decoding_is_plain_with_the_configured_seed(evaluated):
    _, result = evaluated
    assert result["decoding"] == {"drafter": "none", "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 5}
    assert result["config"]["engine"]["drafter"] == "ngram"  # asked for, and not used:
    for row in result["per_task"]:
        assert row["stats"]["drafted"] == 0 and row["stats"]["new_tokens"] > 0
    assert result["generation"]["new_tokens"] == sum(r["stats"]["new_tokens"] for r in result["per_task"])


def test_evaluation_is_tracked_in_mlflow(evaluated):
    from mlflow import MlflowClient

    out, _ = evaluated
    client = MlflowClient(tracking_uri=f"sqlite:///{out.parent}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("spectune").experiment_id])
    parent = next(r for r in runs if r.info.run_name == "ev")
    assert parent.data.tags["kind"] == "eval" and parent.info.status == "FINISHED"
    child = next(r for r in runs if r.info.run_name == "ev/baseline")
    assert child.data.metrics["tasks"] == 2 and child.data.metrics["successes"] == 0


def _run(iid: str, status: str, success: bool, steps: int) -> SideRun:
    evaluation = "resolved" if success else ("unresolved" if status == "submitted" else "not_submitted")
    return SideRun(iid, "baseline", 0, status, success, evaluation, 1.0, 0.0, steps=steps)


def test_breakdown_counts_by_status_family_and_difficulty():
    instances = [
        Instance("a", "p", "0", "x", family="off_by_one", difficulty="locatable"),
        Instance("b", "p", "0", "x", family="off_by_one", difficulty="semantic"),
        Instance("c", "p", "0", "x", family="arith_swap", difficulty="semantic"),
    ]
    runs = [_run("a", "submitted", True, 4), _run("b", "submitted", False, 6), _run("c", "step_limit", False, 30)]
    got = breakdown(runs, instances)
    assert (got["tasks"], got["successes"]) == (3, 1) and got["success_rate"] == pytest.approx(1 / 3)
    assert got["statuses"]["submitted"] == 2 and got["statuses"]["step_limit"] == 1 and got["statuses"]["error"] == 0
    assert got["evaluation_statuses"] == {"not_submitted": 1, "resolved": 1, "unresolved": 1}
    assert got["mean_steps"] == pytest.approx(40 / 3)
    assert got["by_family"] == {
        "arith_swap": {"tasks": 1, "successes": 0, "success_rate": 0.0},
        "off_by_one": {"tasks": 2, "successes": 1, "success_rate": 0.5},
    }
    assert got["by_difficulty"]["locatable"] == {"tasks": 1, "successes": 1, "success_rate": 1.0}
    empty = breakdown([], instances)
    assert empty["tasks"] == 0 and empty["success_rate"] is None and empty["mean_steps"] is None


def test_command_line_defaults_yield_to_the_users_keys():
    plain = compose_config(CONFIG_NAME, "task.split=test")
    mine = compose_config(CONFIG_NAME, "engine=suffix", "run.name=mine", "engine.temperature=0.7")
    runner = compose_config("config", "engine=none", "task.split=test")
    assert plain.engine.drafter == "none" and plain.run.name.startswith("eval-swe-lite-test-spectune-tiny-")
    assert (mine.engine.drafter, mine.run.name, mine.engine.temperature) == ("suffix", "mine", 0.7)
    # Everything but the run name is the runner's own config with plain decoding.
    plain_data, runner_data = OmegaConf.to_container(plain), OmegaConf.to_container(runner)
    del plain_data["run"]["name"], runner_data["run"]["name"]
    assert plain_data == runner_data


def test_cli_bad_split_exits_2_before_loading_a_model(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "runners.eval_model",
        "task.split=nope",
        f"run.root={tmp_path}",
        "tracking.enabled=false",
    ]
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert proc.returncode == 2, proc.stderr
    assert "unknown swe-lite split 'nope'" in proc.stderr and proc.stderr.count("\n") <= 2
    # The run folder is named by eval_model's default run.name (the default model, plain decoding).
    assert [p.name.startswith("eval-swe-lite-nope-") for p in tmp_path.iterdir()] == [True]
