"""Evaluate a final diff the SWE-bench way, in a fresh sandbox, so that only a real fix resolves.

Materialise the task's starting workspace, check and apply the model's patch, and grade it with checks the
tested code cannot reach (tasks/grading/): the hidden tests (the clean project's test files plus `test_patch`,
read on the host, never from the patched workspace) are split into *probes*, which run in the sandbox and
report what the code did, and *checks*, the expected values, which stay on the host and judge those reports.
Resolved means every listed test (FAIL_TO_PASS and PASS_TO_PASS) passed its checks.

Threat model. The agent's patch is hostile; so is every line of code it adds. It may rewrite the probe runner,
its records and its output at will: the sandbox never holds an expected value, so a forged report must contain
the right answers, which takes a fix. Nothing is refused for what else the patch contains, as SWE-bench does:
- every test file in the workspace (tests/, test_*.py, *_test.py, conftest.py) is replaced by the probes of the
  listed tests; the patch's own test edits, new tests and helpers are left out of the run and reported;
- bytecode (`__pycache__`, `*.pyc`) is deleted, so a stale or planted compiled module cannot stand in for its
  source; symbolic links the diff holds are left out (a stray link is no reason to refuse a fix); both reported;
- pytest, its plugins and settings play no part (the probes run under a plain interpreter), so `conftest.py`,
  `setup.cfg`, `pytest.ini`, `.gitattributes` and the like change nothing; `sitecustomize.py` and `*.pth` are
  not read because the workspace is on `sys.path` only after the interpreter started.
Refused before anything runs, because they cannot be graded safely or in bounded time: unsafe paths
(absolute, `..`, through or creating a symlink: `unsafe_patch`), more than MAX_PATCH_FILES files
(`too_many_files`), a diff over DIFF_LIMIT bytes (`patch_too_large`), a diff git cannot apply (`patch_failed`).
What is not guaranteed: a patch that computes the right answers for exactly the inputs the hidden tests use
(and the wrong ones elsewhere) resolves; the suite's hidden tests use inputs the issue text does not show, so
that takes knowing the tests, which the sandbox does not hold.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tasks.grading.oracle import ModuleSplit, Unprobeable, split_module
from tasks.grading.verdict import Verdict, decide, grading_program
from tasks.patching import (
    TEST_FILE,
    PatchError,
    PatchParseError,
    TooManyFilesError,
    apply_patch,
    check_patch,
    drop_symlinks,
)
from tasks.sandbox.base import DIFF_LIMIT, Sandbox
from tasks.sandbox.owner import owned_tempdir
from tasks.schema import Instance

EVAL_STATUSES = (
    "resolved",
    "unresolved",
    "timeout",
    "resource_limit",
    "output_limit",
    "unsafe_patch",
    "patch_failed",
    "patch_too_large",
    "too_many_files",
    "error",
)
STATUSES = EVAL_STATUSES  # the name other modules import
_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S+)")
BYTECODE = re.compile(r"(^|/)__pycache__(/|$)|\.py[co]$")
GRADING_MARGIN_S = 30.0  # the supervisor's own start and report, beyond the tests' timeout


@dataclass
class EvaluationResult:
    """Outcome of evaluating one patch on one instance."""

    instance_id: str
    resolved: bool
    status: str  # one of EVAL_STATUSES
    tests: dict[str, str] = field(default_factory=dict)  # node id -> passed|failed|error|missing
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


def hidden_tests(instance: Instance, reference: Path) -> None:
    """Turn `reference` (a fresh starting workspace) into the clean project's tests plus `test_patch`."""
    apply_patch(reference, instance.test_patch)


def build_oracle(reference: Path, test_ids: list[str]) -> dict[str, ModuleSplit]:
    """Each test file of `test_ids` split into its probe module and the host's checks (Unprobeable if one cannot)."""
    names: dict[str, list[str]] = {}
    for test_id in test_ids:
        path, sep, name = test_id.partition("::")
        if not sep or "::" in name:
            raise Unprobeable(f"{test_id}: only FILE::test_function ids can be probed")
        names.setdefault(path, []).append(name)
    out = {}
    for path, wanted in names.items():
        source = reference / path
        if not source.is_file():
            raise Unprobeable(f"{path}: no such test file in the hidden tests")
        out[path] = split_module(source.read_text(), path, wanted)
    return out


def clear_for_probes(workspace: Path) -> list[str]:
    """Delete every test file and all bytecode from `workspace`; the deleted paths the clean project lacks."""
    removed = []
    for path in sorted(workspace.rglob("*"), reverse=True):  # files before the folders that hold them
        rel = path.relative_to(workspace).as_posix()
        if rel == ".git" or rel.startswith(".git/"):
            continue
        if TEST_FILE.search(rel) or BYTECODE.search(rel):
            if path.is_symlink() or path.is_file():
                path.unlink()
                removed.append(rel)
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    return removed


def evaluate(
    instance: Instance,
    model_patch: str,
    materialize: Callable[[Instance, Path], Path],
    sandbox_factory: Callable[[], Sandbox],
    timeout: float = 300.0,
) -> EvaluationResult:
    """Apply `model_patch` to a fresh copy of the task and grade it by probes in a new sandbox (module docstring)."""
    t0 = time.perf_counter()
    iid = instance.instance_id

    def done(status: str, message: str = "", tests: dict[str, str] | None = None) -> EvaluationResult:
        return EvaluationResult(iid, status == "resolved", status, tests or {}, message, time.perf_counter() - t0)

    if len(model_patch.encode(errors="surrogateescape")) > DIFF_LIMIT:
        return done("patch_too_large", f"the patch exceeds {DIFF_LIMIT} bytes (DIFF_LIMIT)")
    # symbolic links are never part of a fix: graded without them, and said so
    patch, links = drop_symlinks(model_patch)
    test_ids = [*instance.fail_to_pass, *instance.pass_to_pass]
    with owned_tempdir("eval-") as tmp:
        reference = materialize(instance, Path(tmp) / "reference")
        workspace = materialize(instance, Path(tmp) / "workspace")
        try:
            hidden_tests(instance, reference)
            oracle = build_oracle(reference, test_ids)
        except (PatchError, Unprobeable, SyntaxError) as exc:
            return done("error", f"the instance's hidden tests cannot be graded: {exc}")
        try:
            paths = check_patch(patch, workspace)
        except TooManyFilesError as exc:
            return done("too_many_files", str(exc))
        except PatchParseError as exc:
            return done("patch_failed", str(exc))
        except PatchError as exc:
            return done("unsafe_patch", str(exc))
        try:
            apply_patch(workspace, patch)
        except PatchError as exc:
            return done("patch_failed", str(exc))
        removed = clear_for_probes(workspace)
        # what the patch brought that the run leaves out: its test files (new or edited) and bytecode
        left_out = sorted(
            {p for p in removed if not (reference / p).is_file()} | {p for p in paths if TEST_FILE.search(p)}
        )
        for path, split in oracle.items():
            (workspace / path).parent.mkdir(parents=True, exist_ok=True)
            (workspace / path).write_text(split.probe)
        verdict = grade(workspace, oracle, test_ids, sandbox_factory, timeout)
        shutil.rmtree(reference, ignore_errors=True)
    notes = [
        f"left out of the run: {what} {paths[:5]}"
        for what, paths in (("symbolic links", links), ("the patch's own test files and bytecode", left_out))
        if paths
    ]
    message = "; ".join([verdict.message, *notes]) if verdict.message else "; ".join(notes)
    return done(verdict.status, message, verdict.tests)


def grade(
    workspace: Path,
    oracle: dict[str, ModuleSplit],
    test_ids: list[str],
    sandbox_factory: Callable[[], Sandbox],
    timeout: float,
) -> Verdict:
    """Run the probes of `test_ids` (already written into `workspace`) in a new sandbox and judge them on the host."""
    program, job = grading_program(test_ids, timeout)
    sandbox = sandbox_factory()
    try:
        sandbox.start(workspace)
        result = sandbox.run_trusted(program, job, timeout=timeout + GRADING_MARGIN_S)
    finally:
        sandbox.close()
    return decide(result, oracle, test_ids)


def parse_outcomes(output: str, test_ids: list[str]) -> dict[str, str]:
    """Per-test outcome from pytest -rA output; tests never mentioned are `missing`.

    Only for trusted code (the suite builder runs the clean projects): printed lines can be forged
    by the code under test, so `evaluate` reads a JUnit report instead.
    """
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
