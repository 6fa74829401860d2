"""`python -m training.mtp --quick` on the bundled target: its own trajectories, training, saving, checking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engine.loading import load_model
from engine.mtp import MtpMismatchError, load_mtp
from engine.testing import random_model
from tests.training.conftest import seeded_work
from training import mtp as trainer

BUNDLED_TARGET = Path(__file__).resolve().parents[2] / "models" / "spectune-tiny" / "target"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, quick_trajectories: Path) -> tuple[Path, Path]:
    """(target folder, MTP folder) after one quick training run on the target's own trajectories (2 per split)."""
    root = tmp_path_factory.mktemp("mtp-quick")
    mtp, work = root / "mtp", seeded_work(quick_trajectories, root / "work")
    argv = ["--target", str(BUNDLED_TARGET), "--out", str(mtp), "--work", str(work), "--quick"]
    argv += ["--draft-vocab", "256", "--threads", "1"]
    assert trainer.main(argv) == 0
    return BUNDLED_TARGET, mtp


def test_the_loss_falls_and_the_head_agrees_with_the_target_above_chance(trained):
    _, mtp = trained
    config = json.loads((mtp / "config.json").read_text())
    record = config["trained"]
    assert record["final_loss"] < record["initial_loss"], record
    assert record["data"].startswith("the target's own trajectories")
    train = record["agreement"]["train"]
    assert train["reply_tokens"] > 0
    chance = 1 / config["draft_vocab_size"]
    assert train["position"][0] > 5 * chance, train  # teacher-forced on what it was trained on
    assert set(record["agreement"]) == {"train", "dev", "test"}  # checked on the held-out splits too
    assert len(train["position"]) == record["depth"] == 3


def test_the_saved_module_loads_for_its_target_only(trained):
    target_dir, mtp = trained
    assert sorted(p.name for p in mtp.iterdir()) == ["config.json", "model.safetensors"]
    target = load_model(str(target_dir), device="cpu", dtype="float32")
    module = load_mtp(mtp, target.model)
    assert module.d2t.numel() == 256
    other = random_model("llama", hidden=64, layers=2, dtype=torch.float32)
    with pytest.raises(MtpMismatchError, match=r"trained for another target: .*hidden_size: trained for 256"):
        load_mtp(mtp, other.model)
