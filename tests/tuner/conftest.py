"""Fixtures the tuner tests share: a composed tune config on a few real swe-lite tasks with the bundled models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import IN_CI, PROJECT, compose_config

# Small and fast: 2 search tasks, 1 repeat, no warm-up, bundled model paths made absolute.
SMALL = (
    "task.limit=2",
    "run.repeats=1",
    "run.warmup=false",
    "run.progress=false",
    "run.threads=1",
    "tracking.enabled=false",
    "tuner.confirm=false",
    "space=lookup",
    f"model.target={PROJECT / 'models/spectune-tiny/target'}",
    f"model.draft={PROJECT / 'models/spectune-tiny/draft'}",
)


def tune_config(tmp_path: Path, *overrides: str, drafters: dict | None = None):
    """The tuner's composed config writing under tmp_path (later overrides win; `drafters` replaces the space's)."""
    cfg = compose_config("tune", *SMALL, f"run.root={tmp_path / 'runs'}", "study.name=t", *overrides)
    if drafters is not None:
        OmegaConf.update(cfg, "space.drafters", drafters, merge=False)  # a command-line dict would merge
    return cfg


@pytest.fixture
def tune(tmp_path):
    """tune(*overrides, drafters=None) -> composed config under this test's tmp_path."""
    return lambda *overrides, drafters=None: tune_config(tmp_path, *overrides, drafters=drafters)


def postgres_url() -> str:
    """SPECTUNE_POSTGRES_URL; skips without it, and fails under CI=true, where .ci/run must have set it."""
    url = os.environ.get("SPECTUNE_POSTGRES_URL", "").strip()
    if not url:
        reason = "SPECTUNE_POSTGRES_URL is not set (.ci/run starts a throwaway PostgreSQL and sets it)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return url
