"""Steps: one command of a check, run as a process group under its own timeout and the run's deadline, and what
its output says (JSON, pytest's counts, the tuner's winners, a run's summary). A step's failure is recorded,
never raised."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TAIL = 3000  # characters of a command's stderr (and unparsed stdout) kept in the report


@dataclass(frozen=True)
class Step:
    """One command of a part, with the time it may take and how its stdout is read."""

    part: str
    name: str
    argv: tuple[str, ...]
    timeout_s: float  # its own cap
    min_s: float = 30.0  # what earlier steps must leave it, so one slow check cannot starve the rest
    parse: str = "text"  # json | pytest | tuner | run | text
    artifact: str | None = None  # a file the step writes that the parser reads (the tuner's or run's summary.json)

    def command(self) -> str:
        """The command as one shell line."""
        return shlex.join(self.argv)


@dataclass
class Runner:
    """Runs steps under one deadline, in one working directory and environment, logging full output."""

    cwd: Path
    env: dict[str, str]
    deadline: float  # time.monotonic() by which everything must be done
    log: Path | None = None
    results: list[dict[str, Any]] = field(default_factory=list)

    def remaining(self) -> float:
        """Seconds left before the deadline."""
        return self.deadline - time.monotonic()

    def run(self, step: Step, reserve_s: float = 0.0) -> dict[str, Any]:
        """Run `step` with min(its cap, what the deadline leaves after `reserve_s`); record and return the result."""
        available = self.remaining() - reserve_s
        if available < 5:  # not worth starting: a check killed at once tells nothing
            result = {**_head(step, 0.0), "status": "skipped", "error": "no time left in the run's budget"}
        else:
            result = run_step(step, self.cwd, self.env, min(step.timeout_s, available), self.log)
        self.results.append(result)
        return result


def _head(step: Step, timeout: float) -> dict[str, Any]:
    return {"part": step.part, "name": step.name, "command": step.command(), "timeout_s": round(timeout, 1)}


def run_step(step: Step, cwd: Path, env: dict[str, str], timeout: float, log: Path | None = None) -> dict[str, Any]:
    """Run one step as a subprocess group; a timeout kills the whole group. Never raises for the step's failure."""
    result = _head(step, timeout)
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            # Its own session: a timeout must also end what the step started (a tuner's sandboxed commands).
            proc = subprocess.Popen(
                step.argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
            )
        except OSError as exc:
            return {**result, "status": "failed", "returncode": None, "wall_s": 0.0, "error": str(exc)}
        try:
            code: int | None = proc.wait(timeout=timeout)
            status = "ok" if code == 0 else "failed"
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code, status = None, "timeout"
        wall = time.monotonic() - start
        stdout, stderr = _read(out), _read(err)
    result.update(status=status, returncode=code, wall_s=round(wall, 2))
    if status == "timeout":
        result["error"] = f"killed after {timeout:.0f} s"
    elif status == "failed":
        result["error"] = last_line(stderr) or f"exit code {code}"
    _log(log, result, stdout, stderr)
    data = None
    if status == "ok":
        try:
            data = parse_output(step, stdout)
        except (ValueError, KeyError, TypeError, OSError) as exc:  # a step that exited 0 but printed no report
            result.update(status="failed", error=f"unreadable output: {exc}")
        if data is not None and _judge(step, data) != "ok":
            result.update(status=_judge(step, data), error=data.get("summary") or "nothing checked")
    elif status == "failed" and step.parse == "pytest":
        data = pytest_counts(stdout)  # which tests failed is in the counts and the summary line
        result["error"] = data["summary"] or result["error"]
    if data is not None:
        result["data"] = data
    if data is None or step.parse == "text":
        result["stdout_tail"] = stdout[-TAIL:]
    result["stderr_tail"] = stderr[-TAIL:]
    return result


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def _read(handle: Any) -> str:
    handle.seek(0)
    return handle.read().decode("utf-8", errors="replace")


def last_line(text: str) -> str:
    """The last non-blank line of `text`, at most 300 characters (what a failure's one-line error shows)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _log(log: Path | None, result: dict[str, Any], stdout: str, stderr: str) -> None:
    if log is None:
        return
    with log.open("a", encoding="utf-8") as f:
        f.write(f"\n===== {result['part']}/{result['name']}: {result['status']} in {result.get('wall_s', 0)} s\n")
        f.write(f"$ {result['command']}\n--- stdout\n{stdout[-2_000_000:]}\n--- stderr\n{stderr[-2_000_000:]}\n")


def parse_output(step: Step, stdout: str) -> dict[str, Any] | None:
    """What a step's stdout says, by its kind; None for plain text."""
    if step.parse == "json":
        return json.loads(stdout)
    if step.parse == "pytest":
        return pytest_counts(stdout)
    if step.parse == "tuner":
        return tuner_result(stdout, Path(step.artifact) if step.artifact else None)
    if step.parse == "run":
        return run_result(Path(step.artifact) if step.artifact else None)
    return None


def _judge(step: Step, data: dict[str, Any]) -> str:
    """A step that exited 0 can still have checked nothing: a test run whose CUDA test was skipped."""
    if step.parse == "pytest" and not data.get("passed"):
        return "skipped" if data.get("skipped") else "failed"
    if step.parse == "run" and not data.get("drafted"):
        return "failed"  # the ON side ran but drafted nothing: speculation did not happen
    return "ok"


def pytest_counts(stdout: str) -> dict[str, Any]:
    """Counts of pytest's last summary line ('1 passed, 2 deselected in 3.1s') and its skip reasons."""
    lines = [line.strip("= ").strip() for line in stdout.splitlines() if re.search(r"\bin [\d.]+s\b", line)]
    summary = lines[-1] if lines else ""
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", summary)}
    reasons = [line.strip() for line in stdout.splitlines() if line.startswith("SKIPPED")]
    return {"summary": summary, **counts, "skip_reasons": reasons}


TARGETS = ("spectune", "llama-server", "vLLM", "SGLang")


def tuner_result(stdout: str, summary_path: Path | None) -> dict[str, Any]:
    """The tuner's winner lines as printed, and its summary.json's trials, best point, winners and timings."""
    pattern = re.compile(rf"^({'|'.join(map(re.escape, TARGETS))})\s+trial\s+\d+")
    lines = [line.rstrip() for line in stdout.splitlines() if pattern.match(line)]
    out: dict[str, Any] = {"winner_lines": lines}
    note = [line.strip() for line in stdout.splitlines() if line.startswith("note:")]
    if note:
        out["notes"] = note
    if summary_path is not None and summary_path.is_file():
        s = json.loads(summary_path.read_text())
        best = s.get("best") or {}
        out.update(
            trials=s.get("trials"),
            best={"number": best.get("number"), "value": best.get("value"), "params": best.get("params")},
            winners={
                target: {
                    "trial": w.get("trial"),
                    "on": w.get("on"),
                    "reason": w.get("reason"),
                    "search_speedup": (w.get("search") or {}).get("speedup"),
                    "confirmed_speedup": (w.get("confirmed") or {}).get("speedup"),
                }
                for target, w in (s.get("winners") or {}).items()
            },
            timings=s.get("timings"),
            device=(s.get("provenance") or {}).get("device"),
            forward=(s.get("provenance") or {}).get("forward"),
        )
    if not lines and "winners" not in out:
        raise ValueError("no winner line and no summary.json")
    return out


def run_result(summary_path: Path | None) -> dict[str, Any]:
    """A `python -m runners.run` summary.json: speedup, and per side decode speed and acceptance (`drafted`: ON
    accepted a mean length, so speculation ran)."""
    if summary_path is None or not summary_path.is_file():
        raise ValueError(f"no summary.json at {summary_path}")
    s = json.loads(summary_path.read_text())
    keys = ("decode_tokens_per_s", "mean_accepted_length", "acceptance_rate", "new_tokens", "tasks", "successes")
    sides = {side: {k: (s.get(side) or {}).get(k) for k in keys} for side in ("baseline", "candidate")}
    return {"speedup": s.get("speedup"), **sides, "drafted": bool(sides["candidate"]["mean_accepted_length"])}


def run_plan(steps: list[Step], runner: Runner, on_result: Callable[[], None] = lambda: None) -> None:
    """Run every step in order, each leaving the later ones their minimum; `on_result` after each."""
    for i, step in enumerate(steps):
        later = sum(s.min_s for s in steps[i + 1 :])
        runner.run(step, reserve_s=later)
        on_result()
