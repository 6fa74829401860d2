"""The generalisation probe: fresh instances at sites the committed suite never uses, in a folder of its own."""

from __future__ import annotations

import json
import shutil

import pytest

from tasks.build import DATA_DIR, build_probe, main, probe_order, suite_sites
from tasks.evaluation import evaluate
from tasks.sandbox import make_sandbox
from tasks.suites import SuiteUnavailableError, load_suite
from tasks.swelite.mutations import FAMILIES
from tasks.swelite.projects import list_projects, materialize, mutation_site

KW = dict(seed=3, count=2, projects=["textkit"])


@pytest.fixture(scope="module")
def suite():
    sites, digest = suite_sites()
    ids = {i.instance_id for s in ("train", "dev", "test") for i in load_suite("swe-lite", s)}
    return sites, ids, digest


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probe")
    return tmp, build_probe(out=tmp / "a", **KW)


def test_probe_is_fresh_and_loads_as_its_own_split(probe, suite):
    tmp, manifest = probe
    sites, ids, digest = suite
    instances = load_suite("swe-lite", "probe", path=str(tmp / "a"))
    assert len(instances) == manifest["counts"]["probe"] == 2
    assert {i.repo for i in instances} == {"textkit"}
    for inst in instances:
        assert mutation_site(inst) not in sites, f"{inst.instance_id} reuses a suite site {mutation_site(inst)}"
        assert inst.instance_id not in ids and inst.fail_to_pass and inst.family in FAMILIES
    assert len({mutation_site(i) for i in instances}) == len(instances)
    assert manifest["kind"] == "probe" and manifest["excludes"]["suite_content_hash"] == digest
    assert not (tmp / "a" / "train.jsonl").exists()  # a probe folder holds the probe only
    by_file = load_suite("swe-lite", "probe", path=str(tmp / "a" / "probe.jsonl"))
    assert [i.instance_id for i in by_file] == [i.instance_id for i in instances]


def test_probe_build_is_deterministic_for_a_seed(probe):
    tmp, manifest = probe
    again = build_probe(out=tmp / "b", workers=1, **KW)  # the worker count changes nothing either
    assert again == manifest
    for name in ("probe.jsonl", "manifest.json"):
        assert (tmp / "a" / name).read_bytes() == (tmp / "b" / name).read_bytes(), name


def test_probe_instances_are_real_tasks(probe):
    tmp, _ = probe
    inst = load_suite("swe-lite", "probe", path=str(tmp / "a"))[0]
    make = lambda: make_sandbox("local")  # noqa: E731
    assert evaluate(inst, inst.patch, materialize, make).resolved, "the gold patch must fix a probe instance"
    assert evaluate(inst, "", materialize, make).status == "unresolved"


def test_probe_files_are_manifest_checked(probe, tmp_path):
    tmp, _ = probe
    copy = shutil.copytree(tmp / "a", tmp_path / "edited")
    with pytest.raises(ValueError, match="split=probe"):
        load_suite("swe-lite", "test", path=str(copy / "probe.jsonl"))
    (copy / "probe.jsonl").write_text((copy / "probe.jsonl").read_text().replace("textkit", "textkat", 1))
    with pytest.raises(SuiteUnavailableError, match="does not match its manifest"):
        load_suite("swe-lite", "probe", path=str(copy))
    stale = shutil.copytree(tmp / "a", tmp_path / "stale")
    manifest = json.loads((stale / "manifest.json").read_text())
    manifest["excludes"]["suite_content_hash"] = "0" * 64  # built against another suite: sites may overlap now
    (stale / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SuiteUnavailableError, match="rebuild it"):
        load_suite("swe-lite", "probe", path=str(stale))
    with pytest.raises(SuiteUnavailableError, match="--probe"):
        load_suite("swe-lite", "probe", path=str(tmp_path / "nothing-here"))


def test_order_excludes_suite_sites_and_interleaves_projects(suite):
    sites = suite[0]
    projects = list_projects()
    order = probe_order(1, projects, FAMILIES, sites)
    keys = [(c.project, *c.mutation.site) for c in order]
    assert not set(keys) & sites
    assert len(keys) == len(set(keys)), "a site appears twice"
    assert {c.project for c in order[:40]} == set(projects), "the first round should reach every project"
    assert [c.mutation for c in probe_order(1, projects, FAMILIES, sites)[:50]] == [c.mutation for c in order[:50]]
    assert [c.mutation for c in probe_order(2, projects, FAMILIES, sites)[:50]] != [c.mutation for c in order[:50]]


def test_probe_never_writes_into_the_suite_folder(capsys):
    with pytest.raises(ValueError, match="suite folder"):
        build_probe(seed=1, count=1, out=DATA_DIR)
    with pytest.raises(SystemExit):
        main(["swe-lite", "--probe", "1", "--out", str(DATA_DIR)])
    assert "suite folder" in capsys.readouterr().err
