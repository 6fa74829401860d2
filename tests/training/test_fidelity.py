"""The teacher-forced fidelity check: a turn counts only if greedy decoding reproduces every one of its tokens."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from training import fidelity
from training.sequences import Sequence

VOCAB = 16


class Oracle(torch.nn.Module):
    """Predicts the next token of a fixed sequence, except at the positions told to be wrong."""

    def __init__(self, ids: list[int], wrong: frozenset[int] | set[int] = frozenset()) -> None:
        super().__init__()
        self.ids, self.wrong = ids, wrong

    def forward(self, input_ids: torch.Tensor) -> SimpleNamespace:
        logits = torch.zeros((1, input_ids.shape[1], VOCAB))
        for t in range(input_ids.shape[1] - 1):
            token = self.ids[t + 1]
            logits[0, t, (token + 1) % VOCAB if t + 1 in self.wrong else token] = 1.0
        return SimpleNamespace(logits=logits)


IDS = [1, 4, 5, 6, 2, 9, 3, 7, 8, 2, 0]
SEQ = Sequence("x", "dev", IDS, [i in (2, 3, 4, 7, 8, 9) for i in range(len(IDS))], [(2, 5), (7, 10)])


def test_a_perfect_model_reproduces_every_turn() -> None:
    assert fidelity.turn_matches(fidelity.greedy_tokens(Oracle(IDS), SEQ), SEQ) == [True, True]


def test_one_wrong_token_fails_its_turn_only_and_prompt_errors_do_not_count() -> None:
    assert fidelity.turn_matches(fidelity.greedy_tokens(Oracle(IDS, {8}), SEQ), SEQ) == [True, False]
    assert fidelity.turn_matches(fidelity.greedy_tokens(Oracle(IDS, {1, 5, 6}), SEQ), SEQ) == [True, True]


def test_report_counts_turns_trajectories_and_draft_agreement() -> None:
    other = Sequence("y", "dev", IDS, SEQ.mask, SEQ.turns)
    result = fidelity.report(Oracle(IDS), Oracle(IDS, {3, 8}), [SEQ, other])["dev"]
    assert result["trajectories"] == 2 and result["turn_exact"] == 1.0 and result["trajectory_exact"] == 1.0
    assert result["draft_agreement"] == 4 / 6 and result["mismatched"] == []
