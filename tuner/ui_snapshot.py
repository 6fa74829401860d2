"""PNGs of MLflow's pages for one study's trials, taken with headless Chromium.

    python -m tuner.ui_snapshot --study try1 --out runs/try1/plots/mlflow-trials.png
    python -m tuner.ui_snapshot --study try1 --view compare --out runs/try1/plots/mlflow-compare.png

Serves the tracking store with `mlflow server` on 127.0.0.1 (a free port, loopback only), finds the study's run
and its trial runs, opens the page a user lands on (`trials`: the experiment's runs table on the study's trials
view; `compare`: `#/compare-runs` of the trials) in `chromium --headless` and saves the screenshot. Both processes
are stopped before it returns.
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
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tuner.tracking import KIND_TAG, STUDY_TAG, TRIAL_TAG, compare_url, trials_url

__all__ = ["compare_url", "dump_dom", "find_browser", "run_metrics", "run_tags", "served", "snapshot", "study_runs"]

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# Headless Chromium that talks to nothing but the page it is given: without the background-networking,
# component-update and sync switches it dials out at start (refused on a closed network), and a fresh profile
# per launch keeps one run's stored UI state (MLflow keeps columns and its GenAI/training switch in the
# browser) out of the next.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # it runs as root in CI and containers
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
RENDER_BUDGET_MS = 20000  # virtual time for MLflow's single-page app to fetch and draw before the capture
VIEWS = ("trials", "compare")


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


def _stop(process: subprocess.Popen) -> None:
    """Stop a process started in its own session, with everything it started (SIGTERM, then SIGKILL)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


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
        _stop(server)


def study_runs(base: str, experiment: str, study: str) -> tuple[str, dict, list[dict]]:
    """Through the REST API: (experiment id, the study's run, its trial runs in trial order)."""
    query = urllib.parse.urlencode({"experiment_name": experiment})
    exp_id = _get(base, f"/api/2.0/mlflow/experiments/get-by-name?{query}")["experiment"]["experiment_id"]
    runs, token = [], None
    while True:
        body = {"experiment_ids": [exp_id], "max_results": 1000, **({"page_token": token} if token else {})}
        page = _post(base, "/api/2.0/mlflow/runs/search", body)
        runs += page.get("runs", [])
        if not (token := page.get("next_page_token")):
            break
    parents = [r for r in runs if run_tags(r).get(STUDY_TAG) == study and run_tags(r).get(KIND_TAG) == "study"]
    if not parents:
        raise RuntimeError(f"no study {study!r} in experiment {experiment!r}")
    parent = parents[0]
    # Top-level trial runs of the study, and the nested ones of a study logged before trials were un-nested.
    trials = [
        r
        for r in runs
        if TRIAL_TAG in run_tags(r)
        and (
            (run_tags(r).get(STUDY_TAG) == study and run_tags(r).get(KIND_TAG) == "trial")
            or run_tags(r).get("mlflow.parentRunId") == parent["info"]["run_id"]
        )
    ]
    trials.sort(key=lambda r: int(run_tags(r)[TRIAL_TAG]))
    return exp_id, parent, trials


def find_browser() -> str | None:
    """The first headless-capable Chromium on PATH, or None."""
    return next((path for b in BROWSERS if (path := shutil.which(b))), None)


def _headless(args: list[str], width: int, height: int, timeout: float = 180) -> str:
    """Run headless Chromium on a fresh profile with `args`; its stdout. Stopped, with its helpers, before return."""
    browser = find_browser()
    if browser is None:
        raise RuntimeError(f"no headless browser found ({', '.join(BROWSERS)}); apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="spectune-chromium-") as profile:
        command = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"]
        process = subprocess.Popen(
            [*command, f"--virtual-time-budget={RENDER_BUDGET_MS}", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: renderer and GPU helpers stop with it
        )
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"headless {browser} did not finish within {timeout:.0f} s") from None
        finally:
            _stop(process)
    if process.returncode != 0:
        raise RuntimeError(f"headless {browser} failed ({process.returncode}): {err.strip()[-500:]}")
    return out


def screenshot(url: str, out: Path, width: int = 2200, height: int = 1000) -> Path:
    """Save a PNG of `url` as headless Chromium renders it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    _headless([f"--screenshot={out.resolve()}", url], width, height)
    return out


def dump_dom(url: str, width: int = 2200, height: int = 1000) -> str:
    """The page's DOM after MLflow's app rendered it (what a user sees, as HTML)."""
    return _headless(["--dump-dom", url], width, height)


def view_url(base: str, experiment: str, study: str, view: str = "trials") -> str:
    """The URL of `view` (trials | compare) for `study` on the server at `base`."""
    exp_id, _, trials = study_runs(base, experiment, study)
    if view == "trials":
        return trials_url(base, exp_id, study)
    if view == "compare":
        return compare_url(base, exp_id, [r["info"]["run_id"] for r in trials])
    raise ValueError(f"view must be one of {VIEWS}, got {view!r}")


def snapshot(
    uri: str, experiment: str, study: str, out: Path, width: int = 2200, height: int = 1000, view: str = "trials"
) -> Path:
    """Serve `uri`, open `view` (trials | compare) of `study` in headless Chromium, save `out`."""
    if find_browser() is None:
        raise RuntimeError(f"no headless browser found ({', '.join(BROWSERS)}); apt-get install -y chromium")
    with served(uri) as base:
        return screenshot(view_url(base, experiment, study, view), out, width, height)


def main(argv: list[str] | None = None) -> int:
    """CLI: one line on error, exit 2."""
    parser = argparse.ArgumentParser(prog="python -m tuner.ui_snapshot", description=__doc__.splitlines()[0])
    parser.add_argument("--study", required=True, help="study.name of the study")
    parser.add_argument("--uri", default=f"sqlite:///{Path('runs/mlflow.db').resolve()}", help="MLflow tracking URI")
    parser.add_argument("--experiment", default="spectune-tuner", help="MLflow experiment (tracking.experiment)")
    parser.add_argument("--view", choices=VIEWS, default="trials", help="the runs table's trials view, or compare")
    parser.add_argument("--width", type=int, default=2200, help="browser window width (px)")
    parser.add_argument("--height", type=int, default=1000, help="browser window height (px)")
    parser.add_argument("--out", type=Path, required=True, help="PNG to write")
    args = parser.parse_args(argv)
    try:
        print(snapshot(args.uri, args.experiment, args.study, args.out, args.width, args.height, args.view))
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
