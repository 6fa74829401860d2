"""swe-lite v2: issues show only part of the failing checks, so answering the shown calls resolves nothing."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import subprocess
import sys

import pytest

from tasks.build import SUITE_VERSION
from tasks.evaluation import evaluate
from tasks.patching import apply_patch
from tasks.sandbox import make_sandbox
from tasks.suites import (
    SWE_LITE_DIR,
    SWE_LITE_VERSION,
    SuiteFileError,
    SuiteUnavailableError,
    load_swe_lite,
    spread,
    swe_lite_version,
    verify_swe_lite,
)
from tasks.swelite import check_runner
from tasks.swelite.checks import RULE, checks_of, choose_shown, dependencies, function_of, unseen
from tasks.swelite.projects import copy_project, materialize, project_dir
from tasks.swelite.snippet_attack import issue_snippet, snippet_only_patch, snippet_only_share

SPLITS = ("train", "dev", "test")


@pytest.fixture(scope="module")
def suite():
    return {s: load_swe_lite(s) for s in SPLITS}


def _sample(suite, split, n):
    return spread(suite[split], n)


def test_manifest_is_v2_and_verifies(suite):
    manifest = verify_swe_lite()  # raises on a sha256 mismatch
    assert manifest["version"] == SWE_LITE_VERSION == SUITE_VERSION == "2"
    assert swe_lite_version() == "2"
    assert manifest["issue_rule"] == RULE
    for split in SPLITS:
        assert {i.version for i in suite[split]} == {"2"}, split


def _copy_suite(tmp_path):
    root = tmp_path / "suite"
    shutil.copytree(SWE_LITE_DIR, root)
    return root


def _rehash(root, name):
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256((root / name).read_bytes()).hexdigest()
    (root / "manifest.json").write_text(json.dumps(manifest))


def test_other_versions_and_changed_content_are_refused(tmp_path):
    root = _copy_suite(tmp_path)
    manifest = json.loads((root / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps({**manifest, "version": "1"}))
    with pytest.raises(SuiteUnavailableError, match=r"is swe-lite v1, but this code reads v2"):
        verify_swe_lite(root)
    (root / "manifest.json").write_text(json.dumps(manifest))
    assert swe_lite_version(root) == "2"
    lines = (root / "dev.jsonl").read_text().splitlines(keepends=True)
    (root / "dev.jsonl").write_text(lines[0].replace('"version": "2"', '"version": "1"') + "".join(lines[1:]))
    with pytest.raises(SuiteUnavailableError, match=r"dev\.jsonl does not match its manifest"):
        verify_swe_lite(root)
    _rehash(root, "dev.jsonl")  # the hash now matches, but one instance is a v1 record
    with pytest.raises(SuiteFileError, match=r"instances of swe-lite v\['1'\] in a v2 suite"):
        load_swe_lite("dev", root=root)


def _run(ws, script):
    return subprocess.run([sys.executable, "-"], input=script, cwd=ws, capture_output=True, text=True, timeout=60)


def _failing_checks(inst, tmp_path):
    """Checks of the FAIL_TO_PASS tests that pass on the clean project and fail on the buggy one."""
    wanted: dict[str, list[str]] = {}
    for tid in inst.fail_to_pass:
        path, name = tid.split("::")
        wanted.setdefault(path, []).append(name)
    clean = copy_project(inst.repo, tmp_path / "clean")
    buggy = copy_project(inst.repo, tmp_path / "buggy")
    apply_patch(buggy, inst.bug_patch)
    ok_clean = check_runner.parse(_run(clean, check_runner.script(wanted)).stdout)
    ok_buggy = check_runner.parse(_run(buggy, check_runner.script(wanted)).stdout)
    root = project_dir(inst.repo)
    out = []
    for tid in inst.fail_to_pass:
        for c in checks_of(tid, (root / tid.split("::")[0]).read_text()):
            if ok_clean[tid][c.number] and not ok_buggy[tid][c.number]:
                out.append(c)
    return out


def _snippet_calls_and_checks(snippet):
    """(source of every call the snippet shows, number of checks it shows: prints and try blocks)."""
    tree = ast.parse(snippet)
    calls = {
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) and n.func.id == "print")
    }
    shown = 0
    for stmt in tree.body:
        printed = any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "print" for n in ast.walk(stmt))
        if isinstance(stmt, ast.Try) or printed:
            shown += 1
    return calls, shown


@pytest.mark.parametrize("split", SPLITS)
def test_issues_show_at_most_half_of_the_failing_checks(suite, split, tmp_path):
    for k, inst in enumerate(_sample(suite, split, 4)):
        failing = _failing_checks(inst, tmp_path / str(k))
        calls, shown = _snippet_calls_and_checks(issue_snippet(inst))
        hidden_new = [c for c in failing if not c.calls <= calls]
        assert shown >= 1, inst.instance_id
        # the hidden tests hold at least as many failing checks on unseen calls as the issue shows checks
        assert len(hidden_new) >= shown, (inst.instance_id, shown, len(hidden_new), len(failing))
        assert 2 * shown <= len(failing), (inst.instance_id, shown, len(failing))


def _snippet_output(inst, tmp_path, patch):
    ws = materialize(inst, tmp_path)
    if patch:
        apply_patch(ws, patch)
    return _run(ws, issue_snippet(inst)).stdout


def _expected_block(inst):
    return re.search(r"I expected:\n\n```\n(.*?)```", inst.problem_statement, re.S).group(1)


def test_snippet_only_patch_answers_the_issue_but_resolves_nothing(suite, tmp_path):
    make = lambda: make_sandbox("local")  # noqa: E731
    sample = _sample(suite, "dev", 3) + _sample(suite, "test", 3)
    answered = 0
    for k, inst in enumerate(sample):
        patch = snippet_only_patch(inst)
        assert patch.startswith("diff --git"), inst.instance_id
        if _snippet_output(inst, tmp_path / f"p{k}", patch) == _expected_block(inst):
            answered += 1  # the table really gives the issue what it expects
        result = evaluate(inst, patch, materialize, make)
        assert result.status == "unresolved", (inst.instance_id, result.status, result.message)
        assert any(result.tests[t] != "passed" for t in inst.fail_to_pass), inst.instance_id
        assert evaluate(inst, inst.patch, materialize, make).resolved, inst.instance_id
    assert answered >= len(sample) - 1  # a table cannot rebuild every value (snippet_attack docstring)


def test_snippet_only_share_counts_resolved_results(suite):
    sample = _sample(suite, "test", 2)
    seen = []

    class Result:
        def __init__(self, resolved):
            self.resolved = resolved

    def fake(inst, patch):
        seen.append((inst.instance_id, patch))
        return Result(inst is sample[0])

    assert snippet_only_share(sample, fake) == (1, 2)
    assert seen == [(i.instance_id, snippet_only_patch(i)) for i in sample]  # each graded with its own table


_TESTS = """
from pkg import f, Cache


def test_one():
    assert f(1) == 2
    assert f(2) == 3
    x = f(3)
    assert x == 4
    cache = Cache()
    cache.set("a", 1)
    assert cache.get("a") == 1
    assert cache.get("b") is None
"""


def test_checks_follow_the_names_they_read():
    body = function_of(_TESTS, "test_one").body
    checks = checks_of("tests/test_x.py::test_one", _TESTS)
    assert [c.statement for c in checks] == [0, 1, 3, 6, 7]
    assert checks[2].calls == {"f(3)"}  # `x` comes from `x = f(3)`
    assert checks[3].calls == {"cache.get('a')", "cache.set('a', 1)", "Cache()"}
    assert dependencies(body, 7) == [4, 5]
    # one failing check cannot be shown while another stays hidden
    assert choose_shown(checks[:1], body) is None
    shown, statements = choose_shown(checks[:4], body)  # four failing: show the first two
    assert [c.number for c in shown] == [0, 1] and statements == [0, 1]
    assert len(unseen(checks[:4], shown, frozenset({"f(1)", "f(2)"}))) == 2
    # a hidden check asking the same call as a shown one is not an unseen input
    twice = _TESTS.replace("f(2) == 3", "f(1) != 3")
    same = checks_of("t.py::test_one", twice)
    assert choose_shown(same[:2], function_of(twice, "test_one").body) is None
