"""`mlflow ui` shows the study as one parent run with one child per trial: checked through the REST API of a real
MLflow server on 127.0.0.1 (loopback only), after a real study with the bundled models."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from tuner.search import execute


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(base: str, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_the_served_ui_lists_one_child_run_per_trial_with_its_metrics(tune, tmp_path, monkeypatch):
    from engine.drafters.ngram import NgramDrafter

    original, calls = NgramDrafter.propose, []

    def crash_once(self, *args, **kwargs):  # one failed trial, to see its reason in MLflow
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected for the UI test")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(NgramDrafter, "propose", crash_once)
    db = tmp_path / "mlflow.db"
    cfg = tune(
        "tuner.trials=2",
        "tracking.enabled=true",
        f"tracking.uri=sqlite:///{db}",
        "tracking.experiment=ui-test",
        drafters={"ngram": {"gamma": [2, 4]}},
    )
    execute(cfg)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]  # loopback only
    server = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(base + "/health", timeout=2).read()
                break
            except OSError:
                assert server.poll() is None, "mlflow server exited"
                assert time.monotonic() < deadline, "mlflow server did not answer"
                time.sleep(0.5)
        experiment = _call(base, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=ui-test")["experiment"]
        runs = _call(
            base, "/api/2.0/mlflow/runs/search", {"experiment_ids": [experiment["experiment_id"]], "max_results": 100}
        )["runs"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()

    def tags(run):
        return {t["key"]: t["value"] for t in run["data"].get("tags", [])}

    def metrics(run):
        return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}

    [parent] = [r for r in runs if tags(r).get("spectune.kind") == "study"]
    children = [r for r in runs if tags(r).get("mlflow.parentRunId") == parent["info"]["run_id"]]
    rows = [json.loads(line) for line in (tmp_path / "runs" / "t" / "trials.jsonl").read_text().splitlines()]
    assert sorted(int(tags(c)["spectune.trial"]) for c in children) == [r["number"] for r in rows]
    by_trial = {int(tags(c)["spectune.trial"]): c for c in children}
    assert tags(by_trial[0])["role"] == "baseline"
    for row in rows:
        child = by_trial[row["number"]]
        assert tags(child)["state"] == row["state"]
        if row["state"] == "COMPLETE":
            m = metrics(child)
            assert m["objective_seconds_per_success"] == row["value"]
            assert {"constraint_vram_gib", "constraint_regressions", "speedup", "largest_context"} <= m.keys()
            if row["role"] == "candidate":
                assert {"acceptance_rate", "mean_accepted_length", "decode_tokens_per_s"} <= m.keys()
        else:
            assert child["info"]["status"] == "FAILED" and "injected for the UI test" in tags(child)["reason"]
    assert "best_seconds_per_success" in metrics(parent)
