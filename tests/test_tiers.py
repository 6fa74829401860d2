"""The two test tiers: markers declared once (pyproject.toml), applied once (tests/conftest.py), every need implies
slow, every listed test exists, and the README's and CI's command stays the full suite."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.conftest import ALL, BY_FIXTURE, BY_PATH, BY_TEST, NEEDS, PROJECT, SLOW, SLOW_WHERE, needs_cuda, tier_marks

FULL = "python -m pytest -q -n 2"
FAST = 'python -m pytest -q -n 2 -m "not slow"'


def _pytest_options() -> dict:
    return tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def test_the_markers_are_declared_and_strict():
    options = _pytest_options()
    declared = {line.split(":")[0] for line in options["markers"]}
    assert declared == {"slow", *NEEDS}
    assert "--strict-markers" in options["addopts"].split()
    assert "-m" not in options["addopts"].split(), "the bare command must stay the full suite"


def test_every_need_implies_slow():
    assert tier_marks("tests/serving/test_llama_server.py::test_x", ["binary"], {}, []) == {"server", "slow"}
    assert tier_marks("tests/tasks/test_x.py::test_y[docker]", [], {"kind": "docker"}, []) == {"docker", "slow"}
    assert tier_marks("tests/tasks/test_x.py::test_y[local]", [], {"kind": "local"}, []) == set()
    assert tier_marks("tests/tasks/test_docker_sandbox.py::test_a", ["docker_ok"], {}, []) == {"docker", "slow"}
    killed = "tests/tuner/test_storage.py::test_killed_worker_trial_is_failed_and_retried_by_heartbeat[postgres]"
    assert tier_marks(killed, [], {"kind": "postgres"}, []) == {"postgres", "slow"}
    assert tier_marks("tests/tuner/test_storage.py::test_postgres_storage_keeps_trials", [], {}, []) == {
        "postgres",
        "slow",
    }
    cuda = needs_cuda.mark.kwargs["reason"]
    assert tier_marks("tests/engine/test_graphs.py::test_g", [], {}, [cuda]) == {"gpu", "slow"}
    assert tier_marks("tests/training/test_trainer.py::test_t", ["quick_build"], {}, []) == {"slow"}
    assert tier_marks("tests/engine/test_host.py::test_h", ["tmp_path"], {}, ["other reason"]) == set()


def test_slow_by_measurement_takes_whole_files_tests_and_parameters():
    assert tier_marks("tests/tuner/test_resume.py::test_anything[sqlite]", [], {}, []) == {"slow"}
    search = "tests/tuner/test_search.py::test_a_slow_candidate_is_pruned_before_the_end"
    assert tier_marks(search, ["tune"], {}, []) == {"slow"}
    assert tier_marks("tests/tuner/test_search.py::test_not_listed", ["tune"], {}, []) == set()
    greedy = "tests/engine/test_conformance.py::test_greedy_equals_plain"
    torch, mixed, qwen2 = ("llama", "torch"), ("llama", "mixed"), ("qwen2", "transformers")
    assert tier_marks(f"{greedy}[llama-torch-4-ngram]", [], {"target": torch, "gamma": 4}, []) == set()
    assert tier_marks(f"{greedy}[llama-torch-5-ngram]", [], {"target": torch, "gamma": 5}, []) == {"slow"}
    assert tier_marks(f"{greedy}[llama-mixed-1-ngram]", [], {"target": mixed, "gamma": 1}, []) == {"slow"}
    edges = "tests/engine/test_conformance.py::test_stop_token_and_max_token_edges"
    assert tier_marks(f"{edges}[qwen2-transformers-ngram]", [], {"target": qwen2}, []) == {"slow"}
    assert tier_marks(f"{edges}[gemma3-transformers-ngram]", [], {"target": ("gemma3", "transformers")}, []) == set()


def test_every_listed_file_test_and_fixture_exists():
    tests = [*(entry for entries in BY_TEST.values() for entry in entries), *SLOW_WHERE]
    tests += [f"{path}::{name}" for path, names in SLOW.items() if names != ALL for name in names]
    for path in [*BY_PATH, *SLOW]:
        assert (PROJECT / path).exists(), path
    for test in tests:
        path, _, name = test.partition("::")
        assert (PROJECT / path).exists(), test
        assert not name or re.search(rf"^def {name}\(", (PROJECT / path).read_text(), re.M), test
    defined = "\n".join(p.read_text() for p in (PROJECT / "tests").rglob("*.py"))
    for fixture in BY_FIXTURE:
        assert f"def {fixture}(" in defined, fixture


def test_the_readme_and_ci_run_the_full_suite_and_testing_md_prints_both():
    readme = (PROJECT / "README.md").read_text()
    assert f"```bash\n{FULL}\n```" in readme
    ci = [line for line in (PROJECT / ".ci" / "run").read_text().splitlines() if "pytest" in line and "#" not in line]
    assert ci == [FULL]
    testing = (PROJECT / "docs" / "testing.md").read_text()
    assert FULL in testing and FAST in testing


@pytest.mark.parametrize("marker", [*NEEDS, "slow"])
def test_testing_md_says_what_each_marker_leaves_out(marker):
    section = (PROJECT / "docs" / "testing.md").read_text().split("## Two tiers")[1].split("\n## ")[0]
    assert f"`{marker}`" in section
