"""The committed swe-lite suite: frozen, split by site, valid in the sandbox; the builder deterministic."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tasks.build import build
from tasks.evaluation import evaluate
from tasks.sandbox import make_sandbox
from tasks.suites import SWE_LITE_DIR, load_swe_lite, verify_swe_lite
from tasks.swelite.mutations import FAMILIES
from tasks.swelite.projects import content_hash, list_projects, materialize, mutation_site, project_dir

SPLITS = ("train", "dev", "test")


@pytest.fixture(scope="module")
def suite():
    return {s: load_swe_lite(s) for s in SPLITS}


def test_manifest_matches_the_committed_files(suite):
    manifest = verify_swe_lite()  # raises on a sha256 mismatch
    for split in SPLITS:
        lines = (SWE_LITE_DIR / f"{split}.jsonl").read_text().splitlines()
        assert manifest["counts"][split] == len(lines) == len(suite[split])
    for project, digest in manifest["projects"].items():
        assert content_hash(project_dir(project)) == digest, f"{project} changed; rebuild the suite"


def test_split_sizes_and_coverage(suite):
    assert len(suite["test"]) >= 60 and len(suite["dev"]) >= 40 and len(suite["train"]) >= len(suite["test"])
    assert len(list_projects()) >= 8
    for split in SPLITS:
        difficulty = Counter(i.difficulty for i in suite[split])
        assert min(difficulty["locatable"], difficulty["semantic"]) >= 0.2 * len(suite[split]), (split, difficulty)
        families = {i.family for i in suite[split]}
        assert len(families) >= 8, (split, families)
        assert families <= set(FAMILIES)


def test_splits_share_no_mutation_site_and_no_instance(suite):
    sites = {s: {mutation_site(i) for i in suite[s]} for s in SPLITS}
    ids = {s: {i.instance_id for i in suite[s]} for s in SPLITS}
    for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
        assert not sites[a] & sites[b], f"{a} and {b} share sites {sorted(sites[a] & sites[b])[:3]}"
        assert not ids[a] & ids[b]


def test_instances_hide_the_deciding_tests_and_the_fix(suite):
    for inst in suite["test"]:
        assert inst.fail_to_pass and inst.pass_to_pass
        assert not set(inst.fail_to_pass) & set(inst.pass_to_pass)
        fix_lines = [ln[1:] for ln in inst.patch.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        shown = {ln.strip() for ln in inst.problem_statement.splitlines()}
        for line in fix_lines:  # the issue shows the symptom (even the buggy line), never the corrected one
            if len(line.strip()) > 12:
                assert line.strip() not in shown, (inst.instance_id, line)


def test_workspace_lacks_fail_to_pass_tests(suite, tmp_path):
    inst = suite["test"][0]
    ws = materialize(inst, tmp_path / "ws")
    for tid in inst.fail_to_pass:
        path, name = tid.split("::")
        assert f"def {name}(" not in (ws / path).read_text()


@pytest.mark.parametrize("split", SPLITS)
def test_sample_validates_in_local_sandbox(suite, split):
    for inst in suite[split][:3]:
        gold = evaluate(inst, inst.patch, materialize, lambda: make_sandbox("local"))
        empty = evaluate(inst, "", materialize, lambda: make_sandbox("local"))
        assert gold.resolved, f"{inst.instance_id}: gold patch {gold.status}: {gold.message}"
        assert not empty.resolved and empty.status == "unresolved", inst.instance_id
        assert set(gold.tests) == {*inst.fail_to_pass, *inst.pass_to_pass}


def test_evaluation_reports_bad_patches(suite):
    inst = suite["test"][0]
    make = lambda: make_sandbox("local")  # noqa: E731
    traversal = "diff --git a/../escape.py b/../escape.py\n--- a/../escape.py\n+++ b/../escape.py\n@@ -0,0 +1 @@\n+x\n"
    assert evaluate(inst, traversal, materialize, make).status == "unsafe_patch"
    touching = inst.test_patch  # editing the tests is not a fix: the edits are left out of the run, the bug stays
    result = evaluate(inst, touching, materialize, make)
    assert result.status == "unresolved" and "left out of the run" in result.message
    broken = inst.patch.replace("\n-", "\n-NOT IN THE FILE ", 1)  # a removed line that does not exist
    assert evaluate(inst, broken, materialize, make).status == "patch_failed"


def test_builder_is_deterministic(tmp_path):
    kwargs = dict(seed=7, projects=["textkit"], per_family=1, families=("comparison_flip", "misspelled_identifier"))
    first = build(out=tmp_path / "a", **kwargs)
    second = build(out=tmp_path / "b", **kwargs)
    for name in ("train.jsonl", "dev.jsonl", "test.jsonl", "manifest.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert first == second and sum(first["counts"].values()) >= 1
    rows = [json.loads(x) for x in (tmp_path / "a" / "train.jsonl").read_text().splitlines()]
    for r in rows:
        assert isinstance(r["FAIL_TO_PASS"], str) and json.loads(r["FAIL_TO_PASS"])  # SWE-bench encoding
