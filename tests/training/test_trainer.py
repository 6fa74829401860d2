"""The training loop: batching, schedule, distillation, and a resume that continues exactly."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
import torch

from training import distill, models, trainer
from training.sequences import Sequence
from training.trainer import TrainConfig


class _Tokenizer:
    """Just what models.build reads from a tokenizer."""

    bos_token_id = eos_token_id = pad_token_id = 0

    def __len__(self) -> int:
        return 64

    def get_vocab(self) -> dict[str, int]:
        return {str(i): i for i in range(64)}


SHAPE = models.Shape(hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32, max_positions=64)


def _sequences(n: int = 6) -> list[Sequence]:
    rng = random.Random(0)
    out = []
    for k in range(n):
        length = rng.randint(12, 30)
        ids = [rng.randrange(1, 64) for _ in range(length)]
        mask = [length // 2 <= i for i in range(length)]  # the second half plays the reply
        out.append(Sequence(f"i{k}", "train", ids, mask, [(length // 2, length)]))
    return out


def _train(path: Path, stop_after: int | None = None, loss_fn: trainer.LossFn = trainer.cross_entropy_loss) -> dict:
    model = models.build(SHAPE, _Tokenizer(), seed=3)
    config = TrainConfig(steps=8, batch_tokens=64, lr=1e-2, warmup=2, checkpoint_s=0.0, log_every=100)
    trainer.train(model, _sequences(), config, path, 0, loss_fn=loss_fn, log=lambda _: None, stop_after=stop_after)
    return model.state_dict()


def test_resume_from_a_checkpoint_gives_the_weights_of_an_uninterrupted_run(tmp_path: Path) -> None:
    straight = _train(tmp_path / "a.ckpt")
    interrupted = _train(tmp_path / "b.ckpt", stop_after=3)
    assert torch.load(tmp_path / "b.ckpt", weights_only=False)["step"] == 3
    assert any(not torch.equal(straight[k], interrupted[k]) for k in straight)
    resumed = _train(tmp_path / "b.ckpt")
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


def test_a_checkpoint_from_another_config_is_refused(tmp_path: Path) -> None:
    _train(tmp_path / "c.ckpt", stop_after=2)
    model = models.build(SHAPE, _Tokenizer(), seed=3)
    with pytest.raises(ValueError, match="another training config"):
        trainer.train(model, _sequences(), TrainConfig(steps=9), tmp_path / "c.ckpt", pad_id=0, log=lambda _: None)


def test_batches_respect_the_token_budget_and_cover_every_sequence_once() -> None:
    lengths = [5, 40, 12, 33, 7, 20, 20, 64]
    groups = trainer.batches(lengths, 64)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    assert all(len(g) * max(lengths[i] for i in g) <= 64 for g in groups)
    epoch = [tuple(trainer.batch_at(s, groups, seed=1)) for s in range(len(groups))]
    assert sorted(epoch) == sorted(tuple(g) for g in groups)  # an epoch visits every batch once


def test_schedule_warms_up_then_decays_to_the_floor() -> None:
    config = TrainConfig(steps=100, lr=1.0, warmup=10, min_lr_ratio=0.1)
    rates = [trainer.schedule(s, config) for s in range(100)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in itertools.pairwise(rates[9:]))
    assert trainer.schedule(100, config) == pytest.approx(0.1)


def test_loss_counts_only_masked_positions() -> None:
    model = models.build(SHAPE, _Tokenizer(), seed=0)
    ids = [5, 9, 17, 3, 8, 21, 40, 2, 11, 30]
    mask = [False, False, False, True, True, True, False, False, False, False]  # one reply, then prompt
    seq = Sequence("x", "train", ids, mask, [(3, 6)])

    def loss(tokens: list[int]) -> torch.Tensor:
        batch = trainer.pad([Sequence("x", "train", tokens, mask, [(3, 6)])], [0], pad_id=0)
        return trainer.cross_entropy_loss(model, [0], *batch)

    base = loss(seq.ids)
    assert trainer.reply_logits(model, *trainer.pad([seq], [0], pad_id=0)).shape[0] == 3
    assert torch.equal(loss([*ids[:8], 63, 62]), base)  # prompt tokens after the reply are never labels
    assert not torch.equal(loss([*ids[:4], 63, *ids[5:]]), base)  # a reply token is a label
    padded = trainer.pad([seq, Sequence("y", "train", ids + [1] * 6, mask + [False] * 6, [(3, 6)])], [0, 1], 0)
    assert torch.allclose(trainer.cross_entropy_loss(model, [0, 1], *padded), base, atol=1e-6)  # padding is inert


def test_distillation_pulls_the_draft_towards_the_target(tmp_path: Path) -> None:
    target = models.build(SHAPE, _Tokenizer(), seed=1)
    seqs = _sequences()
    labels = distill.soft_labels(target, seqs, pad_id=0, k=8)
    assert [len(v) for v, _ in labels] == [sum(s.mask[1:]) for s in seqs]
    loss = distill.distillation_loss(labels)
    draft = models.build(SHAPE, _Tokenizer(), seed=2)
    ids, mask = trainer.pad(seqs, list(range(len(seqs))), pad_id=0)
    before = loss(draft, list(range(len(seqs))), ids, mask).item()
    config = TrainConfig(steps=30, batch_tokens=256, lr=1e-2, warmup=2, log_every=100)
    trainer.train(draft, seqs, config, tmp_path / "d.ckpt", pad_id=0, loss_fn=loss, log=lambda _: None)
    assert loss(draft, list(range(len(seqs))), ids, mask).item() < before - 0.1
