"""The verdict from the supervisor's line, without a sandbox: what is resolved, what a limit or a broken run is."""

from __future__ import annotations

import base64
import gzip
import json
import signal
import textwrap

from tasks.grading.oracle import split_module
from tasks.grading.verdict import decide, grading_program
from tasks.sandbox.base import CommandResult

TESTS = textwrap.dedent(
    """
    from pkg import double

    def test_one():
        assert double(2) == 4

    def test_two():
        assert double(3) == 6
    """
)
LISTED = ["tests/test_a.py::test_one", "tests/test_a.py::test_two"]
ORACLE = {"tests/test_a.py": split_module(TESTS, "tests/test_a.py", ["test_one", "test_two"])}


def _records(values: dict[str, int]) -> list[dict]:
    """What a probe run reports when double(x) returned values[test]."""
    out = []
    for test_id in LISTED:
        plan = ORACLE["tests/test_a.py"].plans[test_id.split("::")[1]].events
        out.append({"test": test_id, "begin": True})
        for kind, number in plan:
            if kind == "check":
                out.append({"test": test_id, "check": number, "values": [{"value": values[test_id]}]})
            else:
                out.append({"test": test_id, "step": number, "raised": None})
        out.append({"test": test_id, "end": True})
    return out


def _output(exit_status: int | None, records: list[dict], **extra) -> CommandResult:
    verdict = {"exit_status": exit_status, "timed_out": False, "leftovers": False, "log_tail": "log", **extra}
    verdict["reports"] = [json.dumps(r) for r in records]
    blob = base64.b64encode(gzip.compress(json.dumps(verdict).encode())).decode()
    return CommandResult(returncode=0, output=f"SPECTUNE-VERDICT {blob}\n")


RIGHT = {LISTED[0]: 4, LISTED[1]: 6}


def test_right_observations_resolve_and_a_wrong_one_does_not():
    assert decide(_output(0, _records(RIGHT)), ORACLE, LISTED).status == "resolved"
    verdict = decide(_output(0, _records({**RIGHT, LISTED[1]: 7})), ORACLE, LISTED)
    assert verdict.status == "unresolved" and verdict.tests == {LISTED[0]: "passed", LISTED[1]: "failed"}
    assert "assert double(3) == 6" in verdict.message


def test_lines_that_are_not_records_of_listed_tests_change_nothing():
    noise = ["not json", json.dumps([1, 2]), json.dumps({"test": "tests/other.py::test_x", "end": True})]
    result = _output(0, _records(RIGHT))
    blob = json.loads(gzip.decompress(base64.b64decode(result.output.split()[1])))
    blob["reports"] = noise + blob["reports"]
    output = "SPECTUNE-VERDICT " + base64.b64encode(gzip.compress(json.dumps(blob).encode())).decode() + "\n"
    assert decide(CommandResult(0, output), ORACLE, LISTED).status == "resolved"


def test_statuses_say_what_happened():
    assert decide(CommandResult(returncode=1, output="Traceback ..."), ORACLE, LISTED).status == "error"
    assert decide(CommandResult(returncode=0, output="SPECTUNE-VERDICT xx\n"), ORACLE, LISTED).status == "error"
    assert decide(CommandResult(None, "", timed_out=True), ORACLE, LISTED).status == "timeout"
    assert decide(_output(None, [], timed_out=True), ORACLE, LISTED).status == "timeout"
    for sig in (signal.SIGKILL, signal.SIGXCPU, signal.SIGXFSZ):
        verdict = decide(_output(-sig, _records(RIGHT)[:2]), ORACLE, LISTED)
        assert verdict.status == "resource_limit" and f"signal {int(sig)}" in verdict.message
    assert decide(_output(0, [], reports_truncated=True), ORACLE, LISTED).status == "output_limit"
    oom = _records(RIGHT)
    out_of_memory = {"raised": {"classes": [["builtins", "MemoryError"]], "message": ""}}
    oom[1] = {**oom[1], "values": [out_of_memory]}
    assert decide(_output(0, oom), ORACLE, LISTED).status == "resource_limit"
    crashed = decide(_output(-int(signal.SIGSEGV), _records(RIGHT)[:2]), ORACLE, LISTED)
    assert crashed.status == "unresolved" and "signal 11" in crashed.message


def test_the_program_runs_the_observer_on_test_ids_and_holds_no_check():
    program, job = grading_program(LISTED, timeout=60)
    assert "def run()" in program and job["timeout"] == 60
    assert job["argv"][:5] == ["python", "-P", "-s", "-B", "-c"] and job["argv"][-2:] == LISTED
    assert "double(3) == 6" not in json.dumps(job) and "_spectune" in job["argv"][5]
