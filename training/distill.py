"""Distillation of the draft from the target: the target's soft labels on the assistant positions.

The target runs once over every sequence and keeps its top-k log-probabilities per assistant
position; the draft then learns to match that (renormalised) distribution by cross-entropy, which
is the KL divergence up to a constant. One target forward per sequence, however many draft steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from training.sequences import Sequence
from training.trainer import LossFn, pad, reply_logits

TOP_K = 16  # target probabilities kept per position (the rest of the mass is negligible after training)


@torch.no_grad()
def soft_labels(
    target: torch.nn.Module, sequences: list[Sequence], pad_id: int, k: int = TOP_K, batch: int = 8
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per sequence, (top-k log-probs, their token ids) of the target at each assistant position."""
    target.eval()
    out: list[tuple[torch.Tensor, torch.Tensor]] = []
    for start in range(0, len(sequences), batch):
        indices = list(range(start, min(start + batch, len(sequences))))
        ids, mask = pad(sequences, indices, pad_id)
        logprobs = F.log_softmax(reply_logits(target, ids, mask), dim=-1)
        values, tokens = logprobs.topk(k, dim=-1)
        counts = mask[:, 1:].sum(dim=1).tolist()
        for v, t in zip(values.split(counts), tokens.split(counts), strict=True):
            out.append((v.clone(), t.clone()))
    return out


def distillation_loss(labels: list[tuple[torch.Tensor, torch.Tensor]]) -> LossFn:
    """Loss function for `trainer.train`: cross-entropy of the draft against the target's top-k distribution."""

    def loss(model: torch.nn.Module, indices: list[int], ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        log_q = F.log_softmax(reply_logits(model, ids, mask), dim=-1)
        values = torch.cat([labels[i][0] for i in indices])
        tokens = torch.cat([labels[i][1] for i in indices])
        p = F.softmax(values, dim=-1)  # renormalised over the kept tokens
        return -(p * log_q.gather(1, tokens)).sum(dim=-1).mean()

    return loss
