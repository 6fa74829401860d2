"""Evaluate a final diff the SWE-bench way, in a fresh sandbox, never in the agent's workspace.

Materialise the task's starting workspace, apply the model's patch, then the `test_patch` that
brings back the deciding tests, run FAIL_TO_PASS and PASS_TO_PASS, and report per-test outcomes.
Resolved means every listed test passed. A patch that is unsafe, does not apply or edits tests is
reported as such (and not resolved).
"""

from __future__ import annotations

import re
import shlex
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tasks.patching import PatchError, apply_patch, check_patch, touched_tests
from tasks.sandbox.base import Sandbox
from tasks.schema import Instance

STATUSES = ("resolved", "unresolved", "unsafe_patch", "patch_failed", "touches_tests", "error")
_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S+)")


@dataclass
class EvaluationResult:
    """Outcome of evaluating one patch on one instance."""

    instance_id: str
    resolved: bool
    status: str  # one of STATUSES
    tests: dict[str, str] = field(default_factory=dict)  # node id -> passed|failed|error|skipped|missing
    message: str = ""
    duration_s: float = 0.0

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "instance_id": self.instance_id,
            "resolved": self.resolved,
            "status": self.status,
            "tests": dict(self.tests),
            "message": self.message,
            "duration_s": self.duration_s,
        }


def pytest_command(test_ids: list[str]) -> str:
    """The command that runs the given node ids and prints one outcome line per test (-rA)."""
    ids = " ".join(shlex.quote(t) for t in test_ids)
    return f"python -m pytest -rA --tb=no -q -p no:cacheprovider {ids}"


def parse_outcomes(output: str, test_ids: list[str]) -> dict[str, str]:
    """Per-test outcome from pytest -rA output; tests never mentioned are `missing`."""
    seen: dict[str, str] = {}
    for line in output.splitlines():
        m = _OUTCOME.match(line.strip())
        if not m:
            continue
        word, node = m.groups()
        outcome = {"PASSED": "passed", "XPASS": "passed", "XFAIL": "failed", "SKIPPED": "skipped"}.get(
            word, word.lower()
        )
        seen[node] = outcome
    out: dict[str, str] = {}
    for tid in test_ids:
        if tid in seen:
            out[tid] = seen[tid]
        else:
            # A collection error is reported per file ("ERROR tests/test_x.py"): it fails every test in it.
            file_error = seen.get(tid.split("::", 1)[0])
            out[tid] = "error" if file_error == "error" else "missing"
    return out


def evaluate(
    instance: Instance,
    model_patch: str,
    materialize: Callable[[Instance, Path], Path],
    sandbox_factory: Callable[[], Sandbox],
    timeout: float = 300.0,
) -> EvaluationResult:
    """Apply `model_patch` to a fresh copy of the task and run its deciding tests in a new sandbox."""
    t0 = time.perf_counter()
    iid = instance.instance_id

    def done(status: str, message: str = "", tests: dict[str, str] | None = None) -> EvaluationResult:
        return EvaluationResult(iid, status == "resolved", status, tests or {}, message, time.perf_counter() - t0)

    with tempfile.TemporaryDirectory(prefix="spectune-eval-") as tmp:
        workspace = materialize(instance, Path(tmp) / "workspace")
        try:
            paths = check_patch(model_patch, workspace)
        except PatchError as exc:
            return done("unsafe_patch", str(exc))
        tests_touched = touched_tests(paths)
        if tests_touched:
            return done("touches_tests", f"the patch edits test files: {tests_touched}")
        try:
            apply_patch(workspace, model_patch)
        except PatchError as exc:
            return done("patch_failed", str(exc))
        try:
            apply_patch(workspace, instance.test_patch)
        except PatchError as exc:
            return done("error", f"test_patch does not apply: {exc}")
        test_ids = [*instance.fail_to_pass, *instance.pass_to_pass]
        sandbox = sandbox_factory()
        try:
            sandbox.start(workspace)
            result = sandbox.run(pytest_command(test_ids), timeout=timeout)
        finally:
            sandbox.close()
    if result.timed_out:
        return done("unresolved", f"tests timed out after {timeout:g}s", dict.fromkeys(test_ids, "error"))
    tests = parse_outcomes(result.output, test_ids)
    failing = [t for t, o in tests.items() if o != "passed"]
    if failing:
        return done("unresolved", f"{len(failing)} of {len(test_ids)} tests not passing: {failing[:5]}", tests)
    return done("resolved", "", tests)
