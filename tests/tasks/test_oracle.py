"""The oracle without a sandbox: tests split into probes and host checks, the probes' values judged on the host.

The probe a test becomes must not hold its expected values, nor say which comparison, negation or exception the
test wants; the host's judgement must agree with the original test's own outcome.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from tasks.evaluation import build_oracle, hidden_tests
from tasks.grading.observer import encode
from tasks.grading.oracle import Unprobeable, decode, judge, split_module
from tasks.suites import load_suite
from tasks.swelite.projects import list_projects, materialize, project_dir

PROJECT = {
    "pkg/__init__.py": textwrap.dedent(
        """
        class Bad(ValueError):
            pass

        class Box:
            def __init__(self, n):
                self.n = n
            def __eq__(self, other):
                return isinstance(other, Box) and other.n == self.n
            def __lt__(self, other):
                return self.n < other.n
            def __bool__(self):
                return self.n != 0
            def __contains__(self, x):
                return x == self.n

        def double(x):
            if x < 0:
                raise Bad(f"negative: {x}")
            return x * 2
        """
    )
}
TESTS = textwrap.dedent(
    """
    import pytest
    from decimal import Decimal
    from pkg import Bad, Box, double

    EXPECTED_SIX = 6
    SCALE = 10 * 2


    def test_values():
        assert double(3) == EXPECTED_SIX
        assert double(2) == 4 and double(0) == 0
        assert double(5) != 11
        assert Decimal("1.5") * 2 == Decimal("3.0")
        assert [double(1), double(2)] == [2, 4]
        assert double(SCALE) > 39


    def test_objects():
        assert Box(1) == Box(1)
        assert not Box(0)
        assert Box(2) < Box(3)
        assert 4 in Box(4)
        assert 5 not in Box(4)
        assert double(1) is not None


    def test_raises():
        with pytest.raises(Bad, match="negative: -1"):
            double(-1)
        with pytest.raises(ValueError) as info:
            double(-2)
        assert str(info.value) == "negative: -2"


    def test_loop():
        for x in [1, 2, 3]:
            assert double(x) == x + x
    """
)


def _workspace(tmp_path: Path, project: dict[str, str], tests: str) -> Path:
    root = tmp_path / "ws"
    for rel, text in {**project, "tests/test_it.py": tests}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _observe(root: Path, split, names: list[str]) -> dict[str, list[dict]]:
    """Run the probe module with the real observer (no sandbox: trusted test code), records per test."""
    (root / "tests/test_it.py").write_text(split.probe)
    observer = Path(__file__).resolve().parents[2] / "tasks/grading/observer.py"
    read, write = os.pipe()
    ids = [f"tests/test_it.py::{n}" for n in names]
    proc = subprocess.Popen(
        [sys.executable, "-P", "-s", "-B", str(observer), *ids],
        cwd=root,
        pass_fds=(write, 3),
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: os.dup2(write, 3),
    )
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    assert proc.wait(timeout=60) == 0
    out: dict[str, list[dict]] = {n: [] for n in names}
    for line in data.decode().splitlines():
        record = json.loads(line)
        out[record["test"].split("::")[1]].append(record)
    return out


NAMES = ["test_values", "test_objects", "test_raises", "test_loop"]


def test_a_correct_project_passes_every_check_and_a_wrong_one_fails_where_pytest_would(tmp_path):
    root = _workspace(tmp_path, PROJECT, TESTS)
    split = split_module(TESTS, "tests/test_it.py", NAMES)
    records = _observe(root, split, NAMES)
    assert {n: judge(split, n, records[n])[0] for n in NAMES} == dict.fromkeys(NAMES, "passed")
    wrong = {"pkg/__init__.py": PROJECT["pkg/__init__.py"].replace("return x * 2", "return x * 2 + (x == 3)")}
    wrong["pkg/__init__.py"] = wrong["pkg/__init__.py"].replace('f"negative: {x}"', 'f"below zero: {x}"')
    root = _workspace(tmp_path / "wrong", wrong, TESTS)
    records = _observe(root, split, NAMES)
    verdicts = {n: judge(split, n, records[n]) for n in NAMES}
    assert verdicts["test_values"] == ("failed", "assert double(3) == EXPECTED_SIX")
    assert verdicts["test_raises"][0] == "failed" and "does not match 'negative: -1'" in verdicts["test_raises"][1]
    assert verdicts["test_loop"] == ("failed", "assert double(x) == x + x")
    assert verdicts["test_objects"][0] == "passed"


def test_the_probe_holds_no_expected_value_and_hides_which_check_is_asked():
    split = split_module(TESTS, "tests/test_it.py", NAMES)
    probe = split.probe
    for expected in ("EXPECTED_SIX", "'3.0'", "[2, 4]", "39", "negative: -", "Bad", "ValueError", "'negative"):
        assert expected not in probe, expected
    assert "assert" not in probe and "pytest" not in probe.replace("import pytest", "")
    twins = [
        ("assert f(x)", "assert not f(x)"),
        ("assert f(x) < g(y)", "assert f(x) >= g(y)"),
        ("assert f(x) == g(y)", "assert f(x) != g(y)"),
        ("assert 3 in f(x)", "assert 3 not in f(x)"),
        ("with pytest.raises(E, match='m'):\n        f(x)", "f(x)"),
    ]
    for one, other in twins:
        made = [
            split_module(
                f"import pytest\nfrom p import E, f, g\nx = y = 1\ndef test_a():\n    {body}\n", "t.py", ["test_a"]
            )
            for body in (one, other)
        ]
        assert made[0].probe == made[1].probe, (one, other)


def test_records_out_of_order_missing_or_unfinished_are_never_a_pass(tmp_path):
    root = _workspace(tmp_path, PROJECT, TESTS)
    split = split_module(TESTS, "tests/test_it.py", NAMES)
    good = _observe(root, split, NAMES)["test_values"]
    events = [r for r in good if "check" in r or "step" in r]
    assert judge(split, "test_values", good) == ("passed", "")
    assert judge(split, "test_values", [good[0], *events[1:], good[-1]])[0] == "error"  # a check left out
    assert judge(split, "test_values", [good[0], events[1], events[0], *events[2:], good[-1]])[0] == "error"
    assert judge(split, "test_values", good[:-1])[0] == "error"  # no end: the probe did not finish
    forged = [dict(r, values=[{"value": True}]) if "check" in r else r for r in good]
    assert judge(split, "test_values", forged)[0] == "failed"  # "True" for everything is not an answer


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -7,
        2**80,
        1.5,
        float("inf"),
        -0.0,
        "tab\there",
        b"\x00\xff",
        (1, "a"),
        [1, [2.5]],
        {"k": (1,)},
        {1, 2},
        frozenset({"a"}),
        Decimal("1.50"),
        Fraction(1, 3),
        1 + 2j,
        int,
        ValueError,
    ],
)
def test_plain_values_travel_exactly(value):
    assert decode(json.loads(json.dumps(encode(value)))) == value
    assert type(decode(json.loads(json.dumps(encode(value))))) is type(value)


def test_objects_and_cut_strings_equal_nothing_on_the_host():
    class Point:
        pass

    assert decode(encode(Point())) != Point()
    long = "x" * 20000
    assert decode(json.loads(json.dumps(encode(long)))) != long


@pytest.mark.parametrize(
    "body, rule",
    [
        ("if f(x):\n        assert f(x) == 1", "branches"),
        ("for i in range(3):\n        assert f(i) == 1", "branches or loops"),
        ("assert f(x) is 3", "`is` against"),
        ("assert 1 < f(x) < g(x)", "chained comparison"),
        ("pytest.skip('no')", "pytest used other than"),
        ("with pytest.raises(AssertionError):\n        assert f(x) == 1", "pytest.raises(AssertionError)"),
    ],
)
def test_a_test_that_cannot_be_split_names_the_file_line_and_rule(body, rule):
    source = f"import pytest\nfrom p import f, g\nx = 1\ndef test_a():\n    {body}\n"
    with pytest.raises(Unprobeable, match=rf"^t\.py:\d+: .*{re.escape(rule)}"):
        split_module(source, "t.py", ["test_a"])


def test_fixtures_are_refused_by_name():
    with pytest.raises(Unprobeable, match=r"t\.py:1: test_a takes fixtures"):
        split_module("def test_a(tmp_path):\n    assert 1\n", "t.py", ["test_a"])


def test_every_test_of_the_bundled_projects_splits_and_ships_no_expected_literal(tmp_path):
    """Every instance's hidden tests are its project's clean test files: each file splits whole, and a literal
    only a check uses (not an input anywhere in the file) is in no probe. A dev instance's listed tests split too."""
    for project in list_projects():
        for path in sorted((project_dir(project) / "tests").glob("test_*.py")):
            source = path.read_text()
            tree = ast.parse(source)
            names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
            split = split_module(source, path.name, names)
            shipped = {n.value for n in ast.walk(ast.parse(split.probe)) if isinstance(n, ast.Constant)}
            leaked = _expected_only_literals(tree) & shipped
            assert not leaked, (project, path.name, leaked)
    inst = load_suite("swe-lite", "dev")[0]
    ref = materialize(inst, tmp_path / "ref")
    hidden_tests(inst, ref)
    oracle = build_oracle(ref, [*inst.fail_to_pass, *inst.pass_to_pass])
    assert sum(len(s.plans) for s in oracle.values()) == len(inst.fail_to_pass) + len(inst.pass_to_pass)


def _expected_only_literals(tree: ast.Module) -> set:
    """String literals (4+ characters) on the constant side of a test's `==` and nowhere else in the file."""
    expected, elsewhere = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
            for side in (node.left, node.comparators[0]):
                if isinstance(side, ast.Constant) and isinstance(side.value, str) and len(side.value) >= 4:
                    expected.add(side.value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            continue
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Constant) and isinstance(child.value, str) and not isinstance(node, ast.Compare):
                elsewhere.add(child.value)
    return expected - elsewhere
