"""The grader's pieces without a sandbox: planted sentinels, the supervisor's verdict line, and the decision rules
(what is resolved, what is tampering, what is a broken run)."""

from __future__ import annotations

import ast
import base64
import gzip
import json
import subprocess
import sys

from tasks.grading.sentinels import plant
from tasks.grading.verdict import decide, grading_program, read_output
from tasks.sandbox.base import CommandResult
from tasks.suites import load_suite
from tasks.swelite.projects import materialize

LISTED = ["tests/test_a.py::test_one", "tests/test_a.py::test_two"]


def _output(exit_status: int | None, records: list[dict], **extra) -> CommandResult:
    verdict = {"exit_status": exit_status, "timed_out": False, "leftovers": False, "log_tail": "log", **extra}
    verdict["reports"] = [json.dumps(r) for r in records]
    blob = base64.b64encode(gzip.compress(json.dumps(verdict).encode())).decode()
    return CommandResult(returncode=0, output=f"SPECTUNE-VERDICT {blob}\n")


def _run(outcomes: dict[str, str], sentinel_outcomes: dict | None = None, exit_status: int = 1, extra=()) -> list:
    records = [{"kind": "start", "workspace": "/workspace"}]
    for nodeid, outcome in {**outcomes, **(sentinel_outcomes or {})}.items():
        path = "/workspace/" + nodeid.split("::", 1)[0]
        records.append({"kind": "item", "nodeid": nodeid, "code_file": path, "module_file": path})
        text = outcome[1] if isinstance(outcome, tuple) else ""
        outcome = outcome[0] if isinstance(outcome, tuple) else outcome
        records.append({"kind": "report", "nodeid": nodeid, "when": "call", "outcome": outcome, "text": text})
    records += list(extra)
    records.append({"kind": "finish", "exitstatus": exit_status})
    return records


def _sentinels():
    from tasks.grading.sentinels import Sentinel

    return [
        Sentinel("tests/test_a.py::test_one_again", "tests/test_a.py", False),
        Sentinel("tests/test_a.py::test_two_edge", "tests/test_a.py", True, "mismatch 12345678"),
    ]


def _planted_ok() -> dict:
    return {
        "tests/test_a.py::test_one_again": "passed",
        "tests/test_a.py::test_two_edge": ("failed", "E mismatch 12345678"),
    }


def test_a_run_whose_tests_and_sentinels_behave_resolves():
    result = _output(1, _run(dict.fromkeys(LISTED, "passed"), _planted_ok()))
    verdict = decide(result, LISTED, _sentinels())
    assert verdict.status == "resolved" and verdict.tests == dict.fromkeys(LISTED, "passed"), verdict.message
    failing = _output(1, _run({LISTED[0]: "passed", LISTED[1]: "failed"}, _planted_ok()))
    assert decide(failing, LISTED, _sentinels()).status == "unresolved"


def test_every_sign_of_interference_is_tampering_never_resolved():
    ok = _planted_ok()
    passing = dict.fromkeys(LISTED, "passed")
    cases = {
        "exit 0": _output(0, _run(passing, ok, exit_status=0)),
        "a must-fail sentinel passed": _output(1, _run(passing, {**ok, "tests/test_a.py::test_two_edge": "passed"})),
        "a sentinel failed with another message": _output(
            1, _run(passing, {**ok, "tests/test_a.py::test_two_edge": ("failed", "E assert 1 == 2")})
        ),
        "a sentinel missing": _output(1, _run(passing, {"tests/test_a.py::test_one_again": "passed"})),
        "a flag": _output(1, _run(passing, ok, extra=[{"kind": "flag", "what": "os.kill(1)", "where": "x.py:1"}])),
        "a line the grader did not write": _output(1, _run(passing, ok), reports_extra=True),
        "the finish record disagrees": _output(2, _run(passing, ok, exit_status=1)),
        "killed by a signal": _output(-9, _run(passing, ok)),
    }
    bad = cases["a line the grader did not write"]
    verdict = read_output(bad.output)
    verdict["reports"].append("PASSED everything")
    blob = base64.b64encode(gzip.compress(json.dumps(verdict).encode())).decode()
    cases["a line the grader did not write"] = CommandResult(returncode=0, output=f"SPECTUNE-VERDICT {blob}\n")
    for name, result in cases.items():
        verdict = decide(result, LISTED, _sentinels())
        assert verdict.status == "tampering", (name, verdict.status, verdict.message)
    moved = _run(passing, ok)
    for record in moved:
        if record.get("nodeid") == LISTED[0] and record["kind"] == "item":
            record["code_file"] = "/workspace/pkg/__init__.py"  # the test's code came from the package
    assert decide(_output(1, moved), LISTED, _sentinels()).status == "tampering"


def test_a_broken_run_is_an_error_or_unresolved_with_the_reason():
    assert decide(CommandResult(returncode=1, output="Traceback ..."), LISTED, _sentinels()).status == "error"
    forged_line = CommandResult(returncode=0, output="SPECTUNE-VERDICT not-base64\n")
    assert decide(forged_line, LISTED, _sentinels()).status == "error"
    timed_out = CommandResult(returncode=None, output="", timed_out=True)
    assert decide(timed_out, LISTED, _sentinels()).status == "unresolved"
    no_finish = _run(dict.fromkeys(LISTED, "passed"), _planted_ok())[:-1]
    verdict = decide(_output(1, no_finish), LISTED, _sentinels())
    assert verdict.status == "unresolved" and "before reporting its end" in verdict.message


def test_sentinels_are_named_like_the_files_tests_and_only_the_grader_knows_which_fail(tmp_path):
    instance = load_suite("swe-lite", "dev", None, None, None, "first")[0]
    ws = materialize(instance, tmp_path / "ws")
    test_ids = [*instance.fail_to_pass, *instance.pass_to_pass]
    before = {p.name: p.read_text() for p in (ws / "tests").glob("test_*.py")}
    sentinels = plant(ws, instance.pass_to_pass, test_ids, seed=7)
    files = {t.split("::", 1)[0] for t in test_ids}
    assert {s.file for s in sentinels} == files and len(sentinels) == 2 * len(files)
    assert {s.must_fail for s in sentinels} == {True, False}
    for sentinel in sentinels:
        source = (ws / sentinel.file).read_text()
        tree = ast.parse(source)  # still a valid module
        name = sentinel.nodeid.split("::", 1)[1]
        assert name.startswith("test_") and name not in before[sentinel.file.split("/")[-1]]
        assert sum(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body) == 1
        if sentinel.must_fail:
            assert sentinel.message in source and sentinel.message not in "".join(before.values())
    # the original tests are all still there, unchanged
    for name, text in before.items():
        kept = {n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}
        now = {n.name for n in ast.parse((ws / "tests" / name).read_text()).body if isinstance(n, ast.FunctionDef)}
        assert kept <= now
    other = plant(materialize(instance, tmp_path / "ws2"), instance.pass_to_pass, test_ids, seed=8)
    assert {s.nodeid for s in other} != {s.nodeid for s in sentinels}  # a new set every grading


def test_the_sentinels_behave_as_planted_on_the_fixed_project(tmp_path):
    """Run on the host (trusted): the must-pass ones pass, the must-fail ones fail with their message."""
    from tasks.patching import apply_patch

    instance = load_suite("swe-lite", "dev", None, None, None, "first")[0]
    ws = materialize(instance, tmp_path / "ws")
    apply_patch(ws, instance.patch)
    apply_patch(ws, instance.test_patch)
    sentinels = plant(ws, instance.pass_to_pass, [*instance.fail_to_pass, *instance.pass_to_pass], seed=3)
    ids = [s.nodeid for s in sentinels]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir=.", *ids],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=120,
    )
    for sentinel in sentinels:
        name = sentinel.nodeid.split("::", 1)[1]
        if sentinel.must_fail:
            assert f"FAILED {sentinel.nodeid}" in run.stdout and sentinel.message in run.stdout, run.stdout[-2000:]
        else:
            assert f"FAILED {sentinel.nodeid}" not in run.stdout and name in ws.joinpath(sentinel.file).read_text()


def test_the_program_hands_the_tests_only_file_paths():
    program, job = grading_program(["tests/test_a.py", "tests/test_b.py"], timeout=60)
    assert "def run()" in program and job["timeout"] == 60
    assert job["argv"][:4] == ["python", "-P", "-s", "-c"]
    assert job["argv"][-2:] == ["tests/test_a.py", "tests/test_b.py"]
    assert not any("::" in a for a in job["argv"])  # no test id (and so no sentinel name) on any command line
