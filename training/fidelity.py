"""A cheap fidelity check: would greedy decoding reproduce the expert's replies, turn by turn?

With the conversation up to a turn given exactly (teacher forcing), greedy decoding reproduces
the expert's reply iff the model's argmax equals the expert's token at every position of that
reply -- so one forward pass per trajectory decides every turn, with no sandbox and no
generation. The real end-to-end number comes from `python -m runners.eval_model`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from training.sequences import Sequence


@torch.no_grad()
def greedy_tokens(model: torch.nn.Module, sequence: Sequence) -> list[int]:
    """The model's argmax next token after every prefix of the sequence (position t predicts ids[t + 1])."""
    model.eval()
    logits = model(input_ids=torch.tensor([sequence.ids])).logits[0]
    return logits.argmax(dim=-1).tolist()


def turn_matches(predicted: list[int], sequence: Sequence) -> list[bool]:
    """Per reply: does greedy decoding (argmaxes `predicted`) from the exact context reproduce every token?"""
    return [all(predicted[t - 1] == sequence.ids[t] for t in range(a, b)) for a, b in sequence.turns]


def token_agreement(draft: list[int], target: list[int], sequence: Sequence) -> tuple[int, int]:
    """(assistant positions where the draft's argmax equals the target's, assistant positions)."""
    positions = [i - 1 for a, b in sequence.turns for i in range(a, b)]
    return sum(draft[p] == target[p] for p in positions), len(positions)


def report(target: torch.nn.Module, draft: torch.nn.Module | None, sequences: list[Sequence]) -> dict[str, Any]:
    """Per split: share of turns and of whole trajectories reproduced, and draft-target token agreement."""
    turns: dict[str, list[bool]] = defaultdict(list)
    whole: dict[str, list[bool]] = defaultdict(list)
    agree: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    mismatched: dict[str, list[str]] = defaultdict(list)
    for s in sequences:
        predicted = greedy_tokens(target, s)
        matches = turn_matches(predicted, s)
        turns[s.split] += matches
        whole[s.split].append(all(matches))
        if not all(matches):
            mismatched[s.split].append(s.instance_id)
        if draft is not None:
            same, total = token_agreement(greedy_tokens(draft, s), predicted, s)
            agree[s.split][0] += same
            agree[s.split][1] += total
    out: dict[str, Any] = {}
    for split in sorted(turns):
        out[split] = {
            "trajectories": len(whole[split]),
            "turn_exact": sum(turns[split]) / len(turns[split]),
            "trajectory_exact": sum(whole[split]) / len(whole[split]),
            "mismatched": mismatched[split],
        }
        if draft is not None:
            same, total = agree[split]
            out[split]["draft_agreement"] = same / total if total else 0.0
    return out
