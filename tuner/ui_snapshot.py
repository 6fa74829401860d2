"""A PNG of MLflow's run-comparison view of one study's trials, taken with headless Chromium.

    python -m tuner.ui_snapshot --study try1 --out runs/try1/plots/mlflow-compare.png

Serves the tracking store with `mlflow server` on 127.0.0.1 (a free port, loopback only), finds the
study's parent run and its child runs (one per trial), opens `#/compare-runs` for them in
`chromium --headless` and saves the screenshot. Both processes are stopped before it returns.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tuner.tracking import STUDY_TAG, TRIAL_TAG

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(base: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _get(base: str, path: str) -> dict:
    with urllib.request.urlopen(base + path, timeout=10) as response:
        return json.loads(response.read())


def _wait(base: str, server: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(base + "/health", timeout=2).read()
            return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("mlflow server did not start") from None
            time.sleep(0.5)


def compare_url(base: str, experiment_id: str, run_ids: list[str]) -> str:
    """MLflow UI's comparison page for these runs."""
    query = urllib.parse.urlencode({"runs": json.dumps(run_ids), "experiments": json.dumps([experiment_id])})
    return f"{base}/#/compare-runs?{query}"


def run_tags(run: dict) -> dict[str, str]:
    """A REST run's tags as a dict."""
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def run_metrics(run: dict) -> dict[str, float]:
    """A REST run's latest metric values as a dict."""
    return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}


@contextmanager
def served(uri: str) -> Iterator[str]:
    """`mlflow server` on `uri`, on 127.0.0.1 at a free port, until the block ends; yields its base URL."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", "127.0.0.1"]
    server = subprocess.Popen(
        [*command, "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: its workers stop with it
    )
    try:
        _wait(base, server)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def study_runs(base: str, experiment: str, study: str) -> tuple[str, dict, list[dict]]:
    """Through the REST API: (experiment id, the study's parent run, its child runs in trial order)."""
    query = urllib.parse.urlencode({"experiment_name": experiment})
    exp_id = _get(base, f"/api/2.0/mlflow/experiments/get-by-name?{query}")["experiment"]["experiment_id"]
    runs = _post(base, "/api/2.0/mlflow/runs/search", {"experiment_ids": [exp_id], "max_results": 1000})["runs"]
    parents = [r for r in runs if run_tags(r).get(STUDY_TAG) == study and run_tags(r).get("spectune.kind") == "study"]
    if not parents:
        raise RuntimeError(f"no study {study!r} in experiment {experiment!r}")
    parent = parents[0]
    children = [r for r in runs if run_tags(r).get("mlflow.parentRunId") == parent["info"]["run_id"]]
    children.sort(key=lambda r: int(run_tags(r).get(TRIAL_TAG, 0)))
    return exp_id, parent, children


def snapshot(uri: str, experiment: str, study: str, out: Path, width: int = 1600, height: int = 1200) -> Path:
    """Serve `uri`, open the comparison of `study`'s trial runs in headless Chromium, save `out`."""
    browser = next((b for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        raise RuntimeError(f"no headless browser found ({', '.join(BROWSERS)}); apt-get install -y chromium")
    with served(uri) as base:
        exp_id, _, children = study_runs(base, experiment, study)
        url = compare_url(base, exp_id, [r["info"]["run_id"] for r in children])
        out.parent.mkdir(parents=True, exist_ok=True)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={width},{height}"]
        shot = ["--virtual-time-budget=20000", f"--screenshot={out.resolve()}", url]  # time for the UI to render
        subprocess.run([browser, *flags, *shot], check=True, timeout=180, capture_output=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: one line on error, exit 2."""
    parser = argparse.ArgumentParser(prog="python -m tuner.ui_snapshot", description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="study.name of the study")
    parser.add_argument("--uri", default=f"sqlite:///{Path('runs/mlflow.db').resolve()}", help="MLflow tracking URI")
    parser.add_argument("--experiment", default="spectune-tuner", help="MLflow experiment (tracking.experiment)")
    parser.add_argument("--out", type=Path, required=True, help="PNG to write")
    args = parser.parse_args(argv)
    try:
        print(snapshot(args.uri, args.experiment, args.study, args.out))
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
