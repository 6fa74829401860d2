"""Units of the task layer that need no sandbox: schema, patches, diffs, mutations, issue texts."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from tasks.evaluation import parse_outcomes
from tasks.patching import TEST_FILE, PatchError, apply_patch, check_patch, patch_paths
from tasks.schema import Instance
from tasks.suites import SuiteUnavailableError, load_suite, load_swe_bench_lite, spread
from tasks.swelite.diffs import file_diff, remove_functions
from tasks.swelite.issue_text import compose_issue, innermost_frame, repro_script
from tasks.swelite.mutations import FAMILIES, find_mutations

SAMPLE = '''\
def total(items, scale):
    """Sum of positive items, scaled."""
    result = 0
    for item in items:
        if not item < 0:
            result += item * scale
    out = round(result, 2)
    return out


def describe(value):
    text = str(value)
    parts = text.split(sep=",")
    return max(len(parts), 1)
'''

RECORD = {
    "instance_id": "demo__demo-1",
    "repo": "demo/demo",
    "base_commit": "0" * 40,
    "problem_statement": "it breaks",
    "hints_text": "",
    "patch": "diff --git a/x.py b/x.py\n",
    "test_patch": "",
    "FAIL_TO_PASS": json.dumps(["tests/test_x.py::test_a"]),
    "PASS_TO_PASS": json.dumps(["tests/test_x.py::test_b", "tests/test_y.py::test_c"]),
    "version": "1.0",
    "created_at": "2024-01-01T00:00:00",
}


def test_instance_round_trips_swe_bench_encoding():
    inst = Instance.from_record(RECORD)
    assert inst.fail_to_pass == ["tests/test_x.py::test_a"]
    assert inst.pass_to_pass[1] == "tests/test_y.py::test_c"
    assert inst.to_record() == RECORD  # JSON-encoded id lists, same field names
    assert set(inst.agent_view()) == {"instance_id", "repo", "problem_statement"}


def test_instance_rejects_bad_records():
    with pytest.raises(ValueError, match="lacks required"):
        Instance.from_record({**RECORD, "repo": ""})
    with pytest.raises(ValueError, match="not a JSON list"):
        Instance.from_record({**RECORD, "FAIL_TO_PASS": "tests/x"})


def test_swe_bench_lite_loads_a_local_jsonl_in_the_exact_schema(tmp_path):
    path = tmp_path / "lite.jsonl"
    rows = [RECORD, {**RECORD, "instance_id": "demo__demo-2"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = load_suite("swe-bench-lite", "test", path=str(path))
    assert [i.instance_id for i in got] == ["demo__demo-1", "demo__demo-2"]
    assert load_swe_bench_lite("test", instance_ids=["demo__demo-2"], path=str(path))[0].instance_id == "demo__demo-2"
    with pytest.raises(ValueError, match="unknown instance id"):
        load_swe_bench_lite("test", instance_ids=["nope"], path=str(path))


def test_swe_bench_lite_offline_fails_fast_with_instructions(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never touch the network in tests
    with pytest.raises(SuiteUnavailableError, match=r"task\.path="):
        load_swe_bench_lite("test")
    with pytest.raises(ValueError, match="allowed"):
        load_suite("swe-bench-full", "test")


def test_patch_paths_and_safety(tmp_path):
    diff = file_diff("pkg/a.py", "x = 1\n", "x = 2\n")
    assert patch_paths(diff) == ["pkg/a.py"]
    paths = ["pkg/a.py", "tests/test_a.py", "pkg/conftest.py"]
    assert [p for p in paths if TEST_FILE.search(p)] == ["tests/test_a.py", "pkg/conftest.py"]
    for evil in ("../outside.py", "/etc/passwd", "pkg/../../x.py", ".git/config"):
        with pytest.raises(PatchError):
            check_patch(file_diff(evil, "a\n", "b\n"))
    (tmp_path / "link").symlink_to("/tmp")
    with pytest.raises(PatchError, match="symlink"):
        check_patch(file_diff("link/x.py", "a\n", "b\n"), tmp_path)


def test_apply_patch_forward_and_reverse(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\ny = 2\n")
    diff = file_diff("a.py", "x = 1\ny = 2\n", "x = 1\ny = 3\n")
    apply_patch(tmp_path, diff)
    assert (tmp_path / "a.py").read_text() == "x = 1\ny = 3\n"
    apply_patch(tmp_path, diff, reverse=True)
    assert (tmp_path / "a.py").read_text() == "x = 1\ny = 2\n"
    with pytest.raises(PatchError, match="does not apply"):
        apply_patch(tmp_path, file_diff("a.py", "nothing like it\n", "z\n"))


def test_remove_functions_keeps_the_rest():
    module = (
        "import x\n\n\ndef test_a():\n    assert 1\n\n\n@mark\ndef test_b():\n    assert 2\n\n\n"
        "def test_c():\n    pass\n"
    )
    held_out = remove_functions(module, {"test_b"})
    tree = ast.parse(held_out)
    assert [n.name for n in tree.body if isinstance(n, ast.FunctionDef)] == ["test_a", "test_c"]
    assert "@mark" not in held_out and "\n\n\n\n" not in held_out
    with pytest.raises(ValueError, match="not found"):
        remove_functions(module, {"test_z"})


def test_every_family_finds_sites_and_mutants_parse():
    muts = find_mutations("pkg/mod.py", SAMPLE)
    found = {m.family for m in muts}
    assert found == set(FAMILIES), f"families without a site: {sorted(set(FAMILIES) - found)}"
    for m in muts:
        mutated = m.apply(SAMPLE)
        assert mutated != SAMPLE
        ast.parse(mutated)  # every mutant is valid Python
        back = SAMPLE[: m.start] + m.original + mutated[m.start + len(m.replacement) :]
        assert back == SAMPLE


def test_mutations_are_deterministic_and_local():
    assert find_mutations("m.py", SAMPLE) == find_mutations("m.py", SAMPLE)
    flip = next(m for m in find_mutations("m.py", SAMPLE) if m.family == "comparison_flip")
    assert (flip.original, flip.replacement) == ("<", "<=")
    dropped = next(m for m in find_mutations("m.py", SAMPLE) if m.family == "negation_dropped")
    assert "if item < 0:" in dropped.apply(SAMPLE)


def test_repro_script_turns_asserts_into_prints_and_runs():
    test_module = (
        "import pytest\nfrom math import floor\n\n\ndef test_floor():\n    x = 2.5\n"
        "    assert floor(x) == 2\n    with pytest.raises(TypeError):\n        floor('a')\n"
    )
    script = repro_script(test_module, "test_floor")
    assert "pytest" not in script and "print(floor(x))" in script
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0] == "2" and out.splitlines()[1].startswith("TypeError:")


def test_innermost_frame_and_issue_text():
    tb = (
        'Traceback (most recent call last):\n  File "<stdin>", line 3, in <module>\n'
        '  File "/workspace/pkg/mod.py", line 7, in total\n    result += itme\n'
        "NameError: name 'itme' is not defined\n"
    )
    assert innermost_frame(tb) == ("/workspace/pkg/mod.py", 7, "NameError")
    assert innermost_frame("5\n") is None
    text = compose_issue("id-1", "pkg", "pkg", "from pkg import total\nprint(total([1], 2))\n", "2\n", tb, True)
    assert "NameError" in text and "```python" in text and "I expected" in text
    assert "total()" in text.splitlines()[0], "the title names the function the reproduction calls"
    assert compose_issue("id-1", "pkg", "pkg", "x\n", "1\n", "2\n", False) == compose_issue(
        "id-1", "pkg", "pkg", "x\n", "1\n", "2\n", False
    ), "issue texts are deterministic"


def test_parse_outcomes_marks_missing_and_collection_errors():
    out = "PASSED tests/test_a.py::test_x\nFAILED tests/test_a.py::test_y - assert 1 == 2\nERROR tests/test_b.py\n"
    got = parse_outcomes(
        out,
        ["tests/test_a.py::test_x", "tests/test_a.py::test_y", "tests/test_b.py::test_z", "tests/test_c.py::test_w"],
    )
    assert got == {
        "tests/test_a.py::test_x": "passed",
        "tests/test_a.py::test_y": "failed",
        "tests/test_b.py::test_z": "error",
        "tests/test_c.py::test_w": "missing",
    }


def test_spread_picks_evenly_spaced_items_in_order():
    assert spread(list(range(10)), 5) == [0, 2, 4, 6, 8]
    assert spread(list(range(7)), 3) == [0, 2, 4]
    assert spread([1, 2], 5) == [1, 2]  # fewer items than asked: all of them


def test_spread_subset_covers_every_project_of_the_test_split():
    first = load_suite("swe-lite", "test", limit=20)
    spread_out = load_suite("swe-lite", "test", limit=20, subset="spread")
    everything = [i.instance_id for i in load_suite("swe-lite", "test")]
    assert len(spread_out) == 20 and len({i.instance_id for i in spread_out}) == 20
    # The split is ordered by project: the first 20 come from two projects, 20 spread ones from all eight.
    assert len({i.repo for i in first}) <= 2
    assert {i.repo for i in spread_out} == {i.repo for i in load_suite("swe-lite", "test")}
    positions = [everything.index(i.instance_id) for i in spread_out]
    assert positions == sorted(positions)
    with pytest.raises(ValueError, match="allowed"):
        load_suite("swe-lite", "test", limit=3, subset="random")
