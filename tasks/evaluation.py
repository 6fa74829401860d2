"""Evaluate a final diff the SWE-bench way, in a fresh sandbox, so that only a real fix resolves.

Materialise the task's starting workspace, check and apply the model's patch, reset the test
infrastructure from the clean project (as SWE-bench's harness resets the test files), apply the
`test_patch` that brings back the deciding tests, run FAIL_TO_PASS and PASS_TO_PASS, and read each
test's outcome from a JUnit XML report. Resolved means every listed test passed *and* pytest's
exit status says so.

What stops a patch from passing without a fix:
- refused before anything runs: unsafe paths (absolute, `..`, through or creating a symlink), test
  files (`touches_tests`), anything that configures or replaces the test runner — `conftest.py`,
  `pytest.py`, `pytest.ini`, `tox.ini`, `setup.cfg`, the `[tool.pytest*]` tables of
  `pyproject.toml`, `sitecustomize.py`, `usercustomize.py`, `*.pth`, bytecode
  (`touches_test_infrastructure`) — all on paths decoded the way git decodes them;
- pytest starts so that the workspace cannot replace or configure it: `python -P -s` (the working
  directory is not on `sys.path` while pytest imports; it is appended, after the standard library
  and site-packages, only for the code under test), plugin autoload off, `-c` a configuration file
  spectune writes outside the workspace, `-p no:cacheprovider`, `--rootdir` fixed;
- outcomes come from the JUnit XML that pytest writes outside the workspace, sent back after
  pytest has exited, under a one-time marker, and cross-checked against pytest's exit status and
  the expected test ids; nothing the code under test prints decides an outcome.

What it does NOT protect against: code under test runs in the same process as pytest, so it can in
principle tamper with pytest from inside (patch its report classes, rewrite the report, exit early
with a forged file) in ways no file check sees. Instead, a patch whose added lines reach for
pytest's internals, the interpreter's frames or module table, `atexit`, process control or /proc
is flagged `suspicious_patch` (SUSPICIOUS_PATTERNS), reported with the line, and not resolved.
"""

from __future__ import annotations

import base64
import gzip
import re
import secrets
import shlex
import shutil
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tasks.patching import (
    TEST_FILE,
    TEST_INFRASTRUCTURE,
    PatchError,
    PatchParseError,
    apply_patch,
    check_patch,
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

# The interpreter start: the workspace is not on sys.path while pytest and its plugins import
# (-P), no user site (-s); the code under test still imports from the working directory, last.
_BOOT = "import os, sys; import pytest; sys.path.append(os.getcwd()); sys.exit(pytest.main(sys.argv[1:]))"
_PYTEST_INI = "[pytest]\\njunit_family = xunit1\\njunit_logging = no\\n"
LOG_TAIL_BYTES = 2000  # of pytest's own output, shown in messages only


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


def evaluation_command(test_ids: list[str], marker: str) -> str:
    """The shell command that runs `test_ids` under a spectune-owned pytest setup and prints the report.

    pytest's own output goes to a file; afterwards the command prints the file's tail, then one line
    `<marker> rc=<exit status> report=<base64 of the gzipped JUnit XML, or "missing">`.
    """
    ids = " ".join(shlex.quote(t) for t in test_ids)
    return "\n".join(
        [
            "R=$(mktemp -d -t spectune-eval.XXXXXX) || exit 125",
            f"printf '{_PYTEST_INI}' > \"$R/pytest.ini\"",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTEST_ADDOPTS= python -P -s -c "
            + shlex.quote(_BOOT)
            + ' -c "$R/pytest.ini" --rootdir=. -p no:cacheprovider -q -rA --tb=short'
            + f' --junitxml="$R/report.xml" {ids} </dev/null >"$R/log" 2>&1',
            "rc=$?",
            f'tail -c {LOG_TAIL_BYTES} "$R/log"; echo',
            'if [ -s "$R/report.xml" ]; then report=$(gzip -c "$R/report.xml" | base64 -w0); else report=missing; fi',
            f'printf "%s rc=%s report=%s\\n" {shlex.quote(marker)} "$rc" "$report"',
        ]
    )


def _junit_address(node_id: str) -> tuple[str, str]:
    """(classname, name) that pytest's JUnit XML gives the test `node_id` (as its `mangle_test_address`)."""
    path, bracket, params = node_id.partition("[")  # parameters may hold "::" or "/": kept whole
    names = path.split("::")
    names[0] = names[0].replace("/", ".").removesuffix(".py")
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def read_report(output: str, marker: str, test_ids: list[str]) -> tuple[int | None, dict[str, str], str]:
    """(pytest's exit status, outcome per expected test id, problem) from an evaluation command's output.

    The problem is "" when the report is present and consistent; otherwise it says what is wrong
    and every outcome is `error` or `missing`.
    """
    line = next((ln for ln in reversed(output.splitlines()) if ln.startswith(marker + " ")), None)
    if line is None:
        return None, dict.fromkeys(test_ids, "error"), "the evaluation printed no report line"
    m = re.fullmatch(re.escape(marker) + r" rc=(\d+) report=(\S+)", line.strip())
    if not m:
        return None, dict.fromkeys(test_ids, "error"), "the report line is malformed"
    rc = int(m.group(1))
    if m.group(2) == "missing":
        return rc, dict.fromkeys(test_ids, "missing"), f"pytest (exit status {rc}) wrote no report"
    try:
        root = ET.fromstring(gzip.decompress(base64.b64decode(m.group(2), validate=True)))
    except (ValueError, OSError, EOFError, ET.ParseError) as exc:
        return rc, dict.fromkeys(test_ids, "error"), f"the JUnit report does not parse ({type(exc).__name__})"
    found: dict[tuple[str, str], list[str]] = {}
    collect_errors: set[str] = set()
    for case in root.iter("testcase"):
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            outcome = "failed"
        elif "error" in kinds:
            outcome = "error"
        elif "skipped" in kinds:
            skipped = case.find("skipped")
            outcome = "failed" if skipped is not None and skipped.get("type") == "pytest.xfail" else "skipped"
        else:
            outcome = "passed"
        address = (case.get("classname", ""), case.get("name", ""))
        found.setdefault(address, []).append(outcome)
        if address[0] == "" and outcome == "error":  # a collection error names the module only
            collect_errors.add(address[1])
    tests: dict[str, str] = {}
    for tid in test_ids:
        outcomes = found.get(_junit_address(tid))
        module = _junit_address(tid.split("::", 1)[0] + "::x")[0]
        if outcomes is None:
            tests[tid] = "error" if module in collect_errors else "missing"
        else:  # a teardown error adds a second entry: any non-pass decides
            tests[tid] = next((o for o in outcomes if o != "passed"), "passed")
    all_passed = all(o == "passed" for o in tests.values())
    if all_passed and rc != 0:
        return rc, tests, f"every listed test passed in the report, but pytest exited {rc}"
    return rc, tests, ""


def suspicious_lines(patch: str) -> list[str]:
    """`why: line` for each line the patch adds outside test files that matches SUSPICIOUS_PATTERNS."""
    hits = []
    path = ""
    for line in patch.splitlines():
        if line.startswith("+++ "):
            path = line[4:].split("\t", 1)[0]
        elif line.startswith("+") and not TEST_FILE.search(path):
            for why, pattern in SUSPICIOUS_PATTERNS:
                if pattern.search(line):
                    hits.append(f"{why}: {line[1:].strip()[:120]}")
                    break
    return hits


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

    test_ids = [*instance.fail_to_pass, *instance.pass_to_pass]
    marker = f"SPECTUNE-REPORT-{secrets.token_hex(16)}"
    if len(model_patch.encode(errors="surrogateescape")) > DIFF_LIMIT:
        return done("patch_too_large", f"the patch exceeds {DIFF_LIMIT} bytes (DIFF_LIMIT)")
    with owned_tempdir("eval-") as tmp:
        clean = materialize(instance, Path(tmp) / "clean")
        workspace = materialize(instance, Path(tmp) / "workspace")
        try:
            paths = check_patch(model_patch, workspace)
        except PatchParseError as exc:
            return done("patch_failed", str(exc))
        except PatchError as exc:
            return done("unsafe_patch", str(exc))
        try:
            apply_patch(workspace, model_patch)
        except PatchError as exc:
            return done("patch_failed", str(exc))
        # infrastructure first: a conftest.py is a test file too, but it says more about the patch
        infrastructure = touched_test_infrastructure(paths, clean, workspace)
        if infrastructure:
            return done("touches_test_infrastructure", f"the patch changes how tests run: {infrastructure}")
        tests_touched = touched_tests(paths)
        if tests_touched:
            return done("touches_tests", f"the patch edits test files: {tests_touched}")
        suspicious = suspicious_lines(model_patch)
        if suspicious:
            more = f" (+{len(suspicious) - 1} more)" if len(suspicious) > 1 else ""
            return done("suspicious_patch", f"the patch {suspicious[0]}{more}")
        reset_test_files(workspace, clean)
        try:
            apply_patch(workspace, instance.test_patch)
        except PatchError as exc:
            return done("error", f"test_patch does not apply: {exc}")
        sandbox = sandbox_factory()
        try:
            sandbox.start(workspace)
            result = sandbox.run(evaluation_command(test_ids, marker), timeout=timeout)
        finally:
            sandbox.close()
    if result.timed_out:
        return done("unresolved", f"tests timed out after {timeout:g}s", dict.fromkeys(test_ids, "error"))
    rc, tests, problem = read_report(result.output, marker, test_ids)
    if problem:
        tail = result.output.rsplit(marker, 1)[0].strip()[-300:]
        return done("unresolved" if rc is not None else "error", f"{problem}; pytest said: {tail}", tests)
    failing = [t for t, o in tests.items() if o != "passed"]
    if failing:
        return done("unresolved", f"{len(failing)} of {len(test_ids)} tests not passing: {failing[:5]}", tests)
    return done("resolved", "", tests)


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
