"""One quick build (two swe-lite instances, toy models) shared by the training tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from training import build


@pytest.fixture(scope="session")
def quick_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(out, work) folders of `python -m training.build --quick`."""
    root = tmp_path_factory.mktemp("quick-build")
    out, work = root / "out", root / "work"
    assert build.main(["--quick", "--out", str(out), "--work", str(work)]) == 0
    return out, work
