"""A resumable training loop over token sequences, with the loss counted on assistant positions only.

Batches are fixed groups of similar-length sequences (little padding); each epoch visits them in an
order drawn from (seed, epoch), so the data position is a function of the step count alone. A
checkpoint (model, optimizer, step, RNG states) is written atomically every few minutes and at the
end; `train` resumes from it and continues exactly as an uninterrupted run would.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from common.errors import ConfigError
from common.files import atomic_path
from training.sequences import Sequence

LossFn = Callable[[torch.nn.Module, list[int], torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class TrainConfig:
    """How long and how fast to train."""

    steps: int  # optimizer steps in all
    batch_tokens: int = 4096  # most padded tokens (sequences x longest) in one batch
    lr: float = 2e-3  # peak learning rate (AdamW)
    warmup: int = 50  # steps of linear warm-up
    min_lr_ratio: float = 0.05  # the cosine decays to lr * this at the last step
    weight_decay: float = 0.0  # memorisation is the goal: nothing pulls weights to zero
    clip: float = 1.0  # gradient-norm clip
    seed: int = 0  # batch order
    checkpoint_s: float = 180.0  # seconds between checkpoints
    log_every: int = 10  # steps between progress lines
    compile: bool = False  # torch.compile the decoder: fused elementwise ops, ~1.6x faster on CPU once compiled


def batches(lengths: list[int], batch_tokens: int) -> list[list[int]]:
    """Sequence indices grouped by length so that count x longest stays within batch_tokens."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > batch_tokens:  # sorted: i is the longest so far
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def schedule(step: int, config: TrainConfig) -> float:
    """Learning rate at `step`: linear warm-up, then cosine down to lr * min_lr_ratio."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    span = max(1, config.steps - config.warmup)
    progress = min(1.0, (step - config.warmup) / span)
    return config.lr * (config.min_lr_ratio + (1 - config.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_at(step: int, groups: list[list[int]], seed: int) -> list[int]:
    """The batch of `step`: epoch step // len(groups), in that epoch's shuffled order."""
    epoch, index = divmod(step, len(groups))
    generator = torch.Generator().manual_seed(seed * 100_003 + epoch)
    order = torch.randperm(len(groups), generator=generator).tolist()
    return groups[order[index]]


def pad(sequences: list[Sequence], indices: list[int], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) of the chosen sequences, right-padded: causal attention never looks at the padding."""
    width = max(len(sequences[i].ids) for i in indices)
    ids = torch.full((len(indices), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(indices), width), dtype=torch.bool)
    for row, i in enumerate(indices):
        n = len(sequences[i].ids)
        ids[row, :n] = torch.tensor(sequences[i].ids)
        mask[row, :n] = torch.tensor(sequences[i].mask)
    return ids, mask


def reply_logits(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Logits predicting each masked token (row-major order); the vocabulary head runs on those rows only."""
    hidden = model.model(input_ids=ids).last_hidden_state
    return model.lm_head(hidden[:, :-1][mask[:, 1:]])


def cross_entropy_loss(
    model: torch.nn.Module, indices: list[int], ids: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Mean next-token cross-entropy over the assistant tokens (`indices` unused: the labels are in `ids`)."""
    return F.cross_entropy(reply_logits(model, ids, mask), ids[:, 1:][mask[:, 1:]])


def _save(path: Path, state: dict[str, Any]) -> None:
    with atomic_path(path) as tmp:  # a crash mid-write leaves the previous checkpoint intact
        torch.save(state, tmp)


def train(
    model: torch.nn.Module,
    sequences: list[Sequence],
    config: TrainConfig,
    checkpoint: Path,
    pad_id: int,
    loss_fn: LossFn = cross_entropy_loss,
    log: Callable[[str], None] = print,
    stop_after: int | None = None,
) -> dict[str, Any]:
    """Train `model` in place for config.steps steps, resuming from `checkpoint` if it exists.

    `stop_after` ends the run (with a checkpoint) after that many steps, as an interruption would.
    Returns a summary: steps done, mean loss of the last logged steps, seconds, tokens per second.
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=(0.9, 0.98), weight_decay=config.weight_decay)
    groups = batches([len(s.ids) for s in sequences], config.batch_tokens)
    step = 0
    if checkpoint.is_file():
        state = torch.load(checkpoint, weights_only=False)
        if state["config"] != asdict(config):
            raise ConfigError(f"{checkpoint} was written with another training config; remove it to start over")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        step = state["step"]
        log(f"resumed from {checkpoint} at step {step}")

    def save() -> None:
        _save(
            checkpoint,
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "step": step,
                "config": asdict(config),
                "torch_rng": torch.get_rng_state(),
                "python_rng": random.getstate(),
            },
        )

    if config.compile:
        model.model.compile(dynamic=True)  # in place: parameter names and state dicts stay the same
    model.train()
    t0 = last_save = time.perf_counter()
    tokens = 0
    recent: list[float] = []
    last_loss = float("nan")
    end = config.steps if stop_after is None else min(config.steps, stop_after)
    first = step  # steps done before this run (a resume): the ETA counts only this run's pace
    while step < end:
        indices = batch_at(step, groups, config.seed)
        ids, mask = pad(sequences, indices, pad_id)
        for group in optimizer.param_groups:
            group["lr"] = schedule(step, config)
        loss = loss_fn(model, indices, ids, mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip)
        optimizer.step()
        step += 1
        tokens += ids.numel()
        recent.append(loss.item())
        if step % config.log_every == 0 or step == end:
            elapsed = time.perf_counter() - t0
            last_loss = sum(recent) / len(recent)
            eta = elapsed / (step - first) * (end - step) if step > first else 0.0
            log(
                f"step {step}/{config.steps} loss {last_loss:.4f} lr {schedule(step - 1, config):.2e} "
                f"{tokens / elapsed:.0f} tok/s {elapsed:.0f} s, ETA {eta:.0f} s"
            )
            recent = []
        if time.perf_counter() - last_save >= config.checkpoint_s:
            save()
            last_save = time.perf_counter()
    save()
    model.eval()
    elapsed = time.perf_counter() - t0
    return {"steps": step, "loss": last_loss, "seconds": elapsed, "tokens_per_s": tokens / elapsed if elapsed else 0.0}
