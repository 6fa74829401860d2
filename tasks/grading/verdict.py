"""On the host: start the grading in a sandbox and read what its trusted supervisor reported.

`grading_program(test_files, timeout)` is the supervisor's source and its job (the tests' interpreter start,
boot.py, and pytest's arguments); `decide(result, listed, sentinels)` turns the sandbox's result into per-test
outcomes and one verdict, trusting nothing the tested process could have written without a check:
- the sandbox's exit status must be the supervisor's 0 and its last output line the verdict;
- pytest must have exited by itself with status 1 (TESTS_FAILED: the must-fail sentinels guarantee it), and
  the plugin's own finish record must agree;
- no flag from the audit hook or the integrity checks;
- every sentinel collected from the file it was planted in, with its expected outcome and message;
- every listed test collected from its own file.
Anything else is `tampering` (the code under test interfered with the test run) or `unresolved`/`error` (the
run itself broke), never `resolved`.
"""

from __future__ import annotations

import base64
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.grading.sentinels import Sentinel
from tasks.sandbox.base import WORKSPACE, CommandResult

HERE = Path(__file__).resolve().parent
VERDICT_PREFIX = "SPECTUNE-VERDICT "
OWN_FILE = "<spectune-grader>"
TESTS_FAILED = 1  # pytest's exit status when a test failed: what a run with must-fail sentinels must end with


@dataclass
class Verdict:
    """What the grading run says: a status, per-test outcomes of the listed tests, why."""

    status: str  # resolved | unresolved | tampering | error
    tests: dict[str, str] = field(default_factory=dict)
    message: str = ""


def grading_program(test_files: list[str], timeout: float) -> tuple[str, dict[str, Any]]:
    """The supervisor's source and its job: run pytest on `test_files` under boot.py, at most `timeout` seconds."""
    supervisor = (HERE / "supervisor.py").read_text()
    boot = (HERE / "boot.py").read_text()
    start = f"exec(compile({boot!r}, {OWN_FILE!r}, 'exec'))"
    pytest_args = ["-c", "/dev/null", "--rootdir=.", "-p", "no:cacheprovider", "-q", "--tb=short", "--", *test_files]
    argv = ["python", "-P", "-s", "-c", start, *pytest_args]
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


def _records(verdict: dict[str, Any]) -> tuple[list[dict], list[str]]:
    records, bad = [], []
    for line in verdict.get("reports") or []:
        try:
            record = json.loads(line)
        except ValueError:
            bad.append(line[:100])
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            bad.append(line[:100])
    return records, bad


def outcomes(records: list[dict]) -> tuple[dict[str, str], dict[str, str]]:
    """(outcome per node id over its phases, the failure text of its call phase)."""
    phases: dict[str, list[str]] = {}
    texts: dict[str, str] = {}
    for r in records:
        if r.get("kind") != "report":
            continue
        nodeid, when, outcome = str(r.get("nodeid")), r.get("when"), r.get("outcome")
        if when == "collect":
            phases.setdefault(nodeid, []).append("error")
            continue
        if outcome == "skipped" and r.get("xfail"):
            outcome = "failed"  # an expected failure is no pass
        elif outcome == "failed" and when != "call":
            outcome = "error"
        phases.setdefault(nodeid, []).append(str(outcome))
        if when == "call" and r.get("text"):
            texts[nodeid] = str(r.get("text"))
    final = {n: next((o for o in seq if o != "passed"), "passed") for n, seq in phases.items()}
    return final, texts


def _collect_errors(final: dict[str, str], test_id: str) -> bool:
    module = test_id.split("::", 1)[0]
    return final.get(module) == "error"


def decide(result: CommandResult, listed: list[str], sentinels: list[Sentinel]) -> Verdict:
    """The verdict on a grading run (module docstring)."""
    errors = dict.fromkeys(listed, "error")
    if result.timed_out:
        return Verdict("unresolved", errors, "the tests did not finish within the evaluation timeout")
    verdict = read_output(result.output)
    if result.returncode != 0 or verdict is None:
        tail = result.output.strip()[-300:]
        return Verdict("error", errors, f"the grading supervisor failed (exit {result.returncode}): {tail}")
    if verdict.get("timed_out"):
        return Verdict("unresolved", errors, "the tests did not finish within the evaluation timeout")
    records, bad = _records(verdict)
    final, texts = outcomes(records)
    tests = {t: final.get(t, "error" if _collect_errors(final, t) else "missing") for t in listed}
    log = (verdict.get("log_tail") or "").strip()[-300:]
    flags = [f"{r.get('what')} ({r.get('where')})" for r in records if r.get("kind") == "flag"]
    if flags:
        more = f" (+{len(flags) - 1} more)" if len(flags) > 1 else ""
        return Verdict("tampering", tests, f"the code under test {flags[0]}{more}")
    if bad:
        return Verdict("tampering", tests, f"the report stream holds {len(bad)} line(s) the grader did not write")
    status = verdict.get("exit_status")
    finish = [r for r in records if r.get("kind") == "finish"]
    said = f"; pytest said: {log}"
    if status is None or status < 0:
        return Verdict("tampering", tests, f"the test process was killed by signal {-(status or 0)}{said}")
    if sentinels and status == 0:
        return Verdict("tampering", tests, "pytest exited 0 although planted tests must fail: the outcome was forged")
    if not finish:
        return Verdict("unresolved", tests, f"pytest ended (exit {status}) before reporting its end{said}")
    if finish[-1].get("exitstatus") != status:
        return Verdict("tampering", tests, f"pytest reported exit {finish[-1].get('exitstatus')} but exited {status}")
    if sentinels and status != TESTS_FAILED:
        return Verdict("unresolved", tests, f"pytest exited {status}, not as a completed test run{said}")
    origins = {r.get("nodeid"): r for r in records if r.get("kind") == "item"}
    root = next((str(r.get("workspace")) for r in records if r.get("kind") == "start"), WORKSPACE)
    for sentinel in sentinels:
        problem = _sentinel_problem(sentinel, final, texts, origins, root)
        if problem:
            return Verdict("tampering", tests, f"a planted check {problem}: the reported outcomes are not the tests'")
    for test_id in listed:
        origin = origins.get(test_id)
        if origin is not None and not _from_file(origin, test_id.split("::", 1)[0], root):
            return Verdict("tampering", tests, f"{test_id} ran code from {origin.get('code_file')}, not its test file")
    failing = [t for t, o in tests.items() if o != "passed"]
    if failing:
        return Verdict("unresolved", tests, f"{len(failing)} of {len(listed)} tests not passing: {failing[:5]}")
    return Verdict("resolved", tests)


def _from_file(origin: dict, rel: str, root: str) -> bool:
    """The item's module and function code both come from the test file `rel` in the workspace `root`."""
    expected = f"{root}/{rel}"
    return origin.get("code_file") == expected and origin.get("module_file") == expected


def _sentinel_problem(sentinel: Sentinel, final: dict, texts: dict, origins: dict, root: str) -> str | None:
    outcome = final.get(sentinel.nodeid)
    if outcome is None or sentinel.nodeid not in origins:
        return "is missing from the run"
    if not _from_file(origins[sentinel.nodeid], sentinel.file, root):
        return "ran from another file"
    if sentinel.must_fail:
        if outcome != "failed":
            return f"that must fail {outcome}"
        if sentinel.message not in texts.get(sentinel.nodeid, ""):
            return "failed without its own message"
    elif outcome != "passed":
        return f"that must pass {outcome}"
    return None
