"""Fixtures the runner tests share."""

from __future__ import annotations

import pytest

from engine.tiny import make_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """A tiny random target model folder (1 layer x 64): the runners' plumbing, fast on CPU."""
    return make_tiny_model(tmp_path_factory.mktemp("models") / "target", layers=1, hidden=64, seed=3)
