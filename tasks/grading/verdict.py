"""On the host: start the probes in a sandbox and decide from what they observed, with checks only the host holds.

`grading_program(test_ids, timeout)` is the supervisor's source and its job (the probe runner and the tests to
run); `decide(result, oracle, test_ids)` reads the supervisor's line and judges every listed test by its plan
(tasks/grading/oracle.py). The records come from the tested process and are not trusted for anything but what
they claim to have observed: a forged record must still hold the right values, which the sandbox never saw.
Statuses say what happened: `timeout` (the tests outran the evaluation timeout), `resource_limit` (the test
process was killed by the memory, CPU or file-size limit, or a test ran out of memory), `output_limit` (the
probes reported more than the grader keeps), `error` (the grading itself broke: no verdict from the supervisor),
else `resolved` or `unresolved`.
"""

from __future__ import annotations

import base64
import gzip
import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.grading.oracle import ModuleSplit, judge
from tasks.sandbox.base import CommandResult

HERE = Path(__file__).resolve().parent
VERDICT_PREFIX = "SPECTUNE-VERDICT "
# Killed by a limit: the memory cgroup's OOM killer and RLIMIT_AS's last resort (SIGKILL), RLIMIT_CPU, RLIMIT_FSIZE.
LIMIT_SIGNALS = {
    signal.SIGKILL: "memory or process limit",
    signal.SIGXCPU: "CPU time limit",
    signal.SIGXFSZ: "file size limit",
}


@dataclass
class Verdict:
    """What the grading run says: a status, per-test outcomes of the listed tests, why."""

    status: str
    tests: dict[str, str] = field(default_factory=dict)
    message: str = ""


def grading_program(test_ids: list[str], timeout: float) -> tuple[str, dict[str, Any]]:
    """The supervisor's source and its job: the probe runner over `test_ids`, at most `timeout` seconds."""
    supervisor = (HERE / "supervisor.py").read_text()
    observer = (HERE / "observer.py").read_text()
    # -P: the workspace is not on sys.path at start (no sitecustomize of its own); -s: no user site; -B: no bytecode
    argv = ["python", "-P", "-s", "-B", "-c", observer, *test_ids]
    return supervisor, {"argv": argv, "timeout": timeout}


def read_output(output: str) -> dict[str, Any] | None:
    """The supervisor's verdict from the sandbox's output (its last line), or None."""
    lines = output.rstrip("\n").splitlines()
    if not lines or not lines[-1].startswith(VERDICT_PREFIX):
        return None
    try:
        return json.loads(gzip.decompress(base64.b64decode(lines[-1][len(VERDICT_PREFIX) :], validate=True)))
    except (ValueError, OSError, EOFError):
        return None


def records_by_test(lines: list[str], test_ids: list[str]) -> dict[str, list[dict]]:
    """The probe's JSON records per listed test; lines that are not records of a listed test are ignored."""
    out: dict[str, list[dict]] = {t: [] for t in test_ids}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("test"), str) and record["test"] in out:
            out[record["test"]].append(record)
    return out


def decide(result: CommandResult, oracle: dict[str, ModuleSplit], test_ids: list[str]) -> Verdict:
    """The verdict on a grading run (module docstring)."""
    errors = dict.fromkeys(test_ids, "error")
    if result.timed_out:
        return Verdict("timeout", errors, "the tests did not finish within the evaluation timeout")
    verdict = read_output(result.output)
    if result.returncode != 0 or verdict is None:
        tail = result.output.strip()[-300:]
        return Verdict("error", errors, f"the grading supervisor failed (exit {result.returncode}): {tail}")
    if verdict.get("timed_out"):
        return Verdict("timeout", errors, "the tests did not finish within the evaluation timeout")
    status = verdict.get("exit_status")
    log = (verdict.get("log_tail") or "").strip()[-300:]
    if isinstance(status, int) and status < 0 and -status in LIMIT_SIGNALS:
        why = LIMIT_SIGNALS[signal.Signals(-status)]
        return Verdict("resource_limit", errors, f"the tests were killed by signal {-status} ({why}); output: {log}")
    if verdict.get("reports_truncated"):
        return Verdict("output_limit", errors, "the probes reported more than the grader keeps (REPORTS_LIMIT)")
    by_test = records_by_test(verdict.get("reports") or [], test_ids)
    tests: dict[str, str] = {}
    why: dict[str, str] = {}
    for test_id in test_ids:
        path, _, name = test_id.partition("::")
        tests[test_id], why[test_id] = judge(oracle[path], name, by_test[test_id])
    failing = [t for t, o in tests.items() if o != "passed"]
    if not failing:
        return Verdict("resolved", tests)
    first = f"{failing[0]}: {why[failing[0]]}"
    if any("MemoryError" in why[t] for t in failing):
        return Verdict("resource_limit", tests, f"a test ran out of memory: {first}")
    if isinstance(status, int) and status < 0:
        first += f" (the test process died by signal {-status})"
    return Verdict("unresolved", tests, f"{len(failing)} of {len(test_ids)} tests not passing; first {first}")
