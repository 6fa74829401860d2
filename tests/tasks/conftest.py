"""Fixtures the sandbox tests share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A one-file project for a sandbox to start from (a test file that needs more defines its own)."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("hello\n")
    return src
