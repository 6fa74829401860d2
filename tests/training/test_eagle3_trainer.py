"""`python -m training.eagle3 --quick` on the bundled target: its own trajectories, the head trained, saved in the HF
EAGLE-3 layout, checked, and drafting in the engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engine.eagle3 import Eagle3MismatchError, load_eagle3
from engine.engine import Engine, EngineConfig
from engine.loading import load_model
from engine.testing import random_model
from tests.training.conftest import seeded_work
from training import eagle3 as trainer

BUNDLED_TARGET = Path(__file__).resolve().parents[2] / "models" / "spectune-tiny" / "target"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, quick_trajectories: Path) -> Path:
    """The head folder after one quick training run on the target's own trajectories (2 per split)."""
    root = tmp_path_factory.mktemp("eagle3-quick")
    head, work = root / "eagle3", seeded_work(quick_trajectories, root / "work")
    argv = ["--target", str(BUNDLED_TARGET), "--out", str(head), "--work", str(work), "--quick"]
    argv += ["--draft-vocab", "256", "--layers", "1", "2", "3", "--threads", "1"]
    assert trainer.main(argv) == 0
    return head


def test_the_loss_falls_and_the_head_agrees_with_the_target_above_chance(trained):
    config = json.loads((trained / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    record = config["spectune"]["trained"]
    assert record["command"].startswith("python -m training.eagle3 ")
    assert record["final_loss"] < record["initial_loss"], record
    train = record["agreement"]["train"]
    assert train["reply_tokens"] > 0 and len(train["position"]) == record["depth"] == 3
    assert train["position"][0] > 5 / config["draft_vocab_size"], train  # well above chance on what it saw
    assert set(record["agreement"]) == {"train", "dev", "test"}


def test_the_saved_head_loads_for_its_target_only_and_drafts(trained):
    target = load_model(str(BUNDLED_TARGET), device="cpu", dtype="float32")
    head = load_eagle3(trained, target.model)
    assert head.d2t.numel() == 256 and head.taps == (1, 2, 3)
    # The defaults: the LM head is the target's own rows of the draft vocabulary, untouched by training, and the
    # layer adds hidden_norm(g) as its residual.
    torch.testing.assert_close(head.lm_head.weight, target.model.get_output_embeddings().weight[head.d2t])
    torch.testing.assert_close(head.norm.weight, target.model.model.norm.weight)
    assert head.config.norm_before_residual is True
    prompt = target.tokenizer.encode("def add(a, b):\n    return a + b\n")
    plain = Engine(target, EngineConfig(drafter="none")).generate(prompt, 24)
    spec = Engine(target, EngineConfig(drafter="eagle3", gamma=3), eagle3=head).generate(prompt, 24)
    assert spec.tokens == plain.tokens and spec.stats.drafted > 0
    other = random_model("llama", hidden=64, layers=4, dtype=torch.float32)
    with pytest.raises(Eagle3MismatchError, match=r"trained for another target: .*hidden_size: trained for 256"):
        load_eagle3(trained, other.model)
