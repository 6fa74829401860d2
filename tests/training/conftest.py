"""What the training tests share: one quick build (two swe-lite instances, toy models), and the bundled target's
own quick trajectories, which the MTP and EAGLE-3 trainers both start from (run once, copied into each work/)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import built_once
from training import build
from training.mtp_data import target_trajectories

BUNDLED_TARGET = Path(__file__).resolve().parents[2] / "models" / "spectune-tiny" / "target"
QUICK_LIMIT = 2  # the trainers' --quick: two instances per split


@pytest.fixture(scope="session")
def quick_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(out, work) folders of `python -m training.build --quick`."""
    root = tmp_path_factory.mktemp("quick-build")
    out, work = root / "out", root / "work"
    assert build.main(["--quick", "--out", str(out), "--work", str(work)]) == 0
    return out, work


@pytest.fixture(scope="session")
def quick_trajectories(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A work folder holding the bundled target's --quick trajectories of every split (one eval run per split,
    once per test run: xdist's workers share it)."""

    def run(work: Path) -> None:
        for split in ("train", "dev", "test"):
            target_trajectories(str(BUNDLED_TARGET), split, work, QUICK_LIMIT, log=lambda _: None)

    return built_once(tmp_path_factory, "target-trajectories", run)


def seeded_work(quick_trajectories: Path, work: Path) -> Path:
    """`work` holding a copy of the shared trajectories: a trainer finds them cached and runs no agent."""
    work.mkdir(parents=True, exist_ok=True)
    for folder in quick_trajectories.glob(f"trajectories-*-limit{QUICK_LIMIT}"):
        shutil.copytree(folder, work / folder.name)
    return work
