"""Evaluate a final diff the SWE-bench way, in a fresh sandbox, so that only a real fix resolves.

Materialise the task's starting workspace, check and apply the model's patch, reset the test
infrastructure from the clean project (as SWE-bench's harness resets the test files), apply the
`test_patch` that brings back the deciding tests, plant canary tests (tasks/grading/sentinels.py), run the
test files, and decide from what a trusted supervisor reports (tasks/grading/). Resolved means every listed
test passed and nothing says the run was interfered with.

Threat model. The agent's patch is hostile; so is every line of code it adds, which runs inside the test
process. The grader trusts: itself on the host (patch checks, resets, the verdict), the sandbox, and the
supervisor, a program of its own that runs inside the sandbox as another user than the tests (root of the
sandbox's namespaces or container) and starts them. It does not trust anything the test process writes.
- Refused before anything runs: unsafe paths (absolute, `..`, through or creating a symlink), test files
  (`touches_tests`), anything that configures or replaces the test runner — `conftest.py`, `pytest.py`,
  `pytest.ini`, `tox.ini`, `setup.cfg`, the `[tool.pytest*]` tables of `pyproject.toml`,
  `sitecustomize.py`, `usercustomize.py`, `*.pth`, bytecode (`touches_test_infrastructure`) — on paths
  decoded the way git decodes them; a binary hunk on a source file or a compiled module (`unsafe_patch`); more
  than MAX_PATCH_FILES files (`too_many_files`: grading time stays bounded); and, as a cheap first line, code
  the patch really wrote (the applied contents, whatever the diff's encoding) that reaches for pytest's
  internals, frames, the module table, `atexit`, processes or /proc (`suspicious_patch`, SUSPICIOUS_PATTERNS).
  Symbolic links the diff holds are left out, never graded (a stray link is no reason to refuse a fix).
- The tests' interpreter cannot be replaced or configured by the workspace: `python -P -s` (the working
  directory is appended to `sys.path` only after pytest is imported), plugin autoload off, `-c /dev/null`,
  `--rootdir` fixed, no cache.
- The report channel is out of the tests' reach: the supervisor gives them a pipe for their output and one
  for the trusted plugin's reports, and is the only writer of the sandbox's own output, so the tested code
  cannot name, write or forge it (no marker, no file, no path on any command line); the supervisor's own
  exit status and the tests' real exit status (it waits for them) are checked.
- Canaries: planted copies of passing tests, some that must pass and some that must fail with a one-time
  message, named like the file's own; every one must be collected from its file with its expected outcome,
  and pytest must exit with TESTS_FAILED. A blanket forgery, a forged exit, look-alike test modules or a cut
  report show (`tampering`).
- Acts, not spellings: an audit hook (PEP 578, installed before anything of the workspace is imported, not
  removable) flags workspace code that walks frames or the object graph, reads /proc beyond its own status,
  signals other processes, starts processes, uses ctypes or compiles code under a test file's name; and the
  plugin checks, at every report, that pytest's, pluggy's, builtins' and the import system's attributes are
  the ones they were before collection (`tampering`).
What remains possible: the trusted plugin itself runs inside the test process, so a patch that forges reports
selectively (failing exactly the planted must-fail checks with their messages, passing the real ones) and undoes
every change to pytest before the next check, without any of the acts the hook sees, is not caught; and in
sandboxes without a separate trusted user (`separates_trusted` False: not root, or no namespaces) the tested
code runs as the supervisor's user and could reach its output. The sandbox, not this module, stands between the
code and the host.
"""

from __future__ import annotations

import re
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tasks.grading.sentinels import plant
from tasks.grading.verdict import Verdict, decide, grading_program
from tasks.patching import (
    TEST_FILE,
    TEST_INFRASTRUCTURE,
    PatchError,
    PatchParseError,
    TooManyFilesError,
    added_lines,
    apply_patch,
    binary_sources,
    check_patch,
    drop_symlinks,
    touched_test_infrastructure,
    touched_tests,
)
from tasks.sandbox.base import DIFF_LIMIT, Sandbox
from tasks.sandbox.owner import owned_tempdir
from tasks.schema import Instance

EVAL_STATUSES = (
    "resolved",
    "unresolved",
    "unsafe_patch",
    "patch_failed",
    "patch_too_large",
    "touches_tests",
    "touches_test_infrastructure",
    "suspicious_patch",
    "too_many_files",
    "tampering",
    "error",
)
STATUSES = EVAL_STATUSES  # the name other modules import
_OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (\S+)")

# (why, pattern) over the lines a patch adds outside test files. Legitimate fixes of the bundled
# suite never need these; a real project that does is reported, not silently passed or failed.
SUSPICIOUS_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (why, re.compile(pattern))
    for why, pattern in (
        ("imports pytest or its internals", r"\b(?:import|from)\s+(?:_?pytest|pluggy)\b|\b_pytest\b"),
        ("registers an atexit hook", r"\batexit\b"),
        ("rewrites the module table", r"\bsys\.modules\b"),
        (
            "walks the interpreter's frames or objects",
            r"\bsys\._getframe\b|\bsys\.(?:settrace|setprofile)\b|\binspect\.(?:stack|currentframe|getouterframes)\b"
            r"|\bgc\.get_(?:objects|referrers|referents)\b",
        ),
        (
            "starts, replaces or ends processes",
            r"\bos\.(?:system|popen|kill\w*)\b|\.(?:fork|forkpty|_exit|exec[lv]p?e?|spawn\w*)\b|\bsubprocess\b|\bmultiprocessing\b",
        ),
        ("reads or writes /proc", r"/proc/"),
        ("names the test report or pytest's settings", r"junit|PYTEST_|\.xml\b"),
    )
)

COMPILED_SUFFIXES = (".so", ".pyd", ".dll", ".dylib")  # extension modules: code no text check can read
GRADING_MARGIN_S = 30.0  # the supervisor's own start and report, beyond the tests' timeout


@dataclass
class EvaluationResult:
    """Outcome of evaluating one patch on one instance."""

    instance_id: str
    resolved: bool
    status: str  # one of EVAL_STATUSES
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


def suspicious_lines(added: dict[str, list[str]]) -> list[str]:
    """`why: path: line` for each added line outside test files that matches SUSPICIOUS_PATTERNS.

    `added` is what the patch really wrote, per file (tasks.patching.added_lines: the applied contents, not the
    diff's text, so a binary hunk or another encoding hides nothing).
    """
    hits = []
    for path, lines in added.items():
        if TEST_FILE.search(path):
            continue
        for line in lines:
            for why, pattern in SUSPICIOUS_PATTERNS:
                if pattern.search(line):
                    hits.append(f"{why}: {path}: {line.strip()[:120]}")
                    break
    return hits


def compiled_modules(paths: list[str]) -> list[str]:
    """Paths of compiled extension modules (`.so`, `.pyd`, ...): native code that runs at import, unreadable."""
    return [p for p in paths if p.lower().endswith(COMPILED_SUFFIXES)]


def _is_test_or_infrastructure(rel: str) -> bool:
    return bool(TEST_FILE.search(rel) or TEST_INFRASTRUCTURE.search(rel))


def reset_test_files(workspace: Path, clean: Path) -> list[str]:
    """Make every test and test-infrastructure file of `workspace` what it is in `clean`; the paths changed."""
    changed = []
    have = {p.relative_to(workspace).as_posix() for p in workspace.rglob("*") if p.is_file() or p.is_symlink()}
    want = {p.relative_to(clean).as_posix() for p in clean.rglob("*") if p.is_file()}
    for rel in sorted(have | want):
        if not _is_test_or_infrastructure(rel):
            continue
        dst, src = workspace / rel, clean / rel
        if rel not in want:
            dst.unlink()
            changed.append(rel)
        elif dst.is_symlink() or not dst.is_file() or dst.read_bytes() != src.read_bytes():
            if dst.is_symlink() or dst.exists():
                dst.unlink()
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            changed.append(rel)
    return changed


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

    if len(model_patch.encode(errors="surrogateescape")) > DIFF_LIMIT:
        return done("patch_too_large", f"the patch exceeds {DIFF_LIMIT} bytes (DIFF_LIMIT)")
    # symbolic links are never part of a fix: graded without them, and said so
    patch, links = drop_symlinks(model_patch)
    note = f" (symbolic links left out: {links})" if links else ""
    with owned_tempdir("eval-") as tmp:
        clean = materialize(instance, Path(tmp) / "clean")
        workspace = materialize(instance, Path(tmp) / "workspace")
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
        # infrastructure first: a conftest.py is a test file too, but it says more about the patch
        infrastructure = touched_test_infrastructure(paths, clean, workspace)
        if infrastructure:
            return done("touches_test_infrastructure", f"the patch changes how tests run: {infrastructure}")
        tests_touched = touched_tests(paths)
        if tests_touched:
            return done("touches_tests", f"the patch edits test files: {tests_touched}")
        unsafe = binary_sources(patch, workspace, paths, before=clean) + compiled_modules(paths)
        if unsafe:
            return done("unsafe_patch", f"the patch writes source or compiled code no check can read: {unsafe}")
        # the cheap first line: what the patch really wrote into each file, whatever the diff's encoding
        suspicious = suspicious_lines(added_lines(clean, workspace, paths))
        if suspicious:
            more = f" (+{len(suspicious) - 1} more)" if len(suspicious) > 1 else ""
            return done("suspicious_patch", f"the patch {suspicious[0]}{more}")
        reset_test_files(workspace, clean)
        try:
            apply_patch(workspace, instance.test_patch)
        except PatchError as exc:
            return done("error", f"test_patch does not apply: {exc}")
        verdict = grade(instance, workspace, sandbox_factory, timeout)
    return done(verdict.status, verdict.message + note, verdict.tests)


def grade(instance: Instance, workspace: Path, sandbox_factory: Callable[[], Sandbox], timeout: float) -> Verdict:
    """Plant the sentinels into `workspace` (its tests already reset), run its test files under the trusted
    supervisor in a new sandbox, decide (module docstring)."""
    test_ids = [*instance.fail_to_pass, *instance.pass_to_pass]
    sentinels = plant(workspace, instance.pass_to_pass, test_ids, seed=secrets.randbits(64))
    test_files = sorted({t.split("::", 1)[0] for t in test_ids})
    program, job = grading_program(test_files, timeout)
    sandbox = sandbox_factory()
    try:
        sandbox.start(workspace)
        result = sandbox.run_trusted(program, job, timeout=timeout + GRADING_MARGIN_S)
    finally:
        sandbox.close()
    return decide(result, test_ids, sentinels)


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
