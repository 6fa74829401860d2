"""Shared test helpers: the CI flag, sandbox factories for tests that run in both sandboxes, a tiny model, the
Hydra configs composed as the entry points compose them (compose_config, runner_config, the runner_cfg fixture)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from engine.forward import path_refusal
from engine.host import probe
from engine.tiny import make_tiny_model

PROJECT = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT / "conf"
IN_CI = os.environ.get("CI", "").strip().lower() == "true"
# `auto` keeps the static path rule in tests (and the commands they start): outputs must not depend on a kernel
# timing taken on the test machine. The per-size plan has its own tests (test_forward_plan.py) with given plans.
os.environ["SPECTUNE_FORWARD_PLANS"] = "off"
SANDBOX_KINDS = ("local", "docker")
# Every skip for something this machine lacks (an instruction set, a device) starts so: the run's summary counts
# them under the host's own line, so a log says which kind of host ran it and what it could not check there.
HOST_LACKS = "host lacks"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason=f"{HOST_LACKS} a CUDA device")
# A workspace's .gitattributes (or any git configuration) must not change what a sandbox's diff() shows: `binary`
# (= -diff -merge -text) or `-diff` would turn a .py edit into a binary patch that text checks cannot read,
# `text`/`eol` rewrite line ends, `filter=`/`ident` the content. Both sandboxes' tests try each of these.
WORKSPACE_ATTRIBUTES = [
    "*.py binary\n",
    "*.py -diff filter=x\n",
    "[attr]hide -diff -text\n*.py hide ident\n*.txt text eol=lf working-tree-encoding=UTF-16\n",
]
WORKSPACE_ATTRIBUTE_IDS = ["binary", "-diff filter", "macro eol encoding"]


def diff_sections(diff: str) -> dict[str, str]:
    """Each file's part of a git diff, by path."""
    return {part.split(" b/", 1)[0]: part for part in diff.split("diff --git a/")[1:]}


def sandbox_factory_or_skip(kind: str, **options) -> Callable:
    """A `make_sandbox(kind)` factory; docker without a daemon or image skips here and fails under CI=true."""
    from tasks.sandbox import SandboxError, make_sandbox

    if kind == "docker":
        try:
            make_sandbox("docker", **options).close()
        except SandboxError as exc:
            if IN_CI:
                raise
            pytest.skip(f"docker sandbox unavailable: {exc}")
    return lambda: make_sandbox(kind, **options)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random target model folder (1 layer x 64): plumbing of runners and benchmarks, fast on CPU."""
    return make_tiny_model(tmp_path_factory.mktemp("models") / "target", layers=1, hidden=64, seed=3)


def compose_config(name: str, *overrides: str) -> DictConfig:
    """conf/`name`.yaml composed with `overrides` (later ones win), as its `python -m` entry composes it: `config`
    the runner's, `eval_model` the model evaluation's, `tune` the tuner's (structured schemas registered first)."""
    from tuner.config import register_tune_configs  # the runner's schema and the tuner's; idempotent

    register_tune_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(name, overrides=list(overrides))


def runner_config(root: Path, *overrides: str) -> DictConfig:
    """The runner's config (`python -m runners.run`) writing its run folders under `root`, without a progress bar."""
    return compose_config("config", f"run.root={root}", "run.progress=false", *overrides)


@pytest.fixture
def runner_cfg(tmp_path: Path) -> Callable[..., DictConfig]:
    """runner_cfg(*overrides) -> the runner's composed config writing under this test's tmp_path (runner_config)."""
    return lambda *overrides: runner_config(tmp_path, *overrides)


def skip_unless_path_runs(path: str, dtype: torch.dtype, device: str = "cpu") -> None:
    """Skip (HOST_LACKS) where this machine cannot run forward `path` in `dtype`: the same test runs on every other."""
    refusal = path_refusal(path, device, dtype)
    if refusal is not None:
        pytest.skip(f"{HOST_LACKS} what forward path {path!r} needs for {str(dtype).removeprefix('torch.')}: {refusal}")


def pytest_report_header(config) -> str:
    """The host's CPU flags and devices at the top of every run, so a log says which machine ran it."""
    return f"spectune host: {probe().describe()}"


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Count the tests skipped for what this host lacks, by reason, under the host's own line."""
    lacking: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        if reason.startswith(HOST_LACKS):
            lacking[reason] = lacking.get(reason, 0) + 1
    if lacking:
        terminalreporter.section("skipped for what this host lacks")
        terminalreporter.write_line(f"host: {probe().describe()}")
        for reason, count in sorted(lacking.items()):
            terminalreporter.write_line(f"{count:4d}  {reason}")


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """A folder `build` fills once for this whole test run, xdist's workers included; returns the folder.

    Session fixtures that make something slow (trajectories, GGUF files) make it once per run, not once per
    worker: the first worker to come holds the lock and builds, the others wait and reuse the folder. Without
    xdist it lies in the session's own temp folder; a build that failed half-way is started afresh.
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's basetemp lies in the run's own folder
        base = base.parent
    folder, done = base / name, base / f"{name}.done"
    with FileLock(str(base / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            build(folder)
            done.touch()
    return folder
