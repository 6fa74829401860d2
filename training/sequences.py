"""Training sequences: a trajectory rendered to exactly the ids the agent loop feeds the model.

Mirrors `agents.loop`: the system and user messages with the generation header, then per turn the
reply as `tokenizer.encode(text)` plus the end-of-turn ids (what `ExpertModel` returns), the
template's closing after them, and the observation rendered as a delta with the next header.
The mask marks the reply tokens (end-of-turn included): the only positions the loss counts.
tests/training checks this rendering against ids recorded from a live `run_agent`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agents.prompts import ChatRenderer
from common.errors import ConfigError


@dataclass
class Sequence:
    """One trajectory as token ids with its loss mask."""

    instance_id: str  # the swe-lite instance
    split: str  # train | dev | test
    ids: list[int]  # the whole conversation as the model sees it
    mask: list[bool]  # True where the token is part of an assistant reply (end-of-turn included)
    turns: list[tuple[int, int]]  # [start, end) of each reply in `ids`


def render(messages: list[dict[str, str]], tokenizer: Any, instance_id: str = "", split: str = "") -> Sequence:
    """Ids and reply mask of a conversation (system, user, then alternating assistant and observation)."""
    renderer = ChatRenderer(tokenizer)
    if [m["role"] for m in messages[:2]] != ["system", "user"]:
        raise ConfigError(f"{instance_id}: a trajectory starts with system and user messages")
    ids = renderer.first(messages[:2])
    mask = [False] * len(ids)
    turns = []
    for k in range(2, len(messages)):
        message = messages[k]
        if message["role"] == "assistant":
            reply = [*renderer.encode(message["content"]), *renderer.end_of_turn_ids]
            turns.append((len(ids), len(ids) + len(reply)))
            ids += reply
            mask += [True] * len(reply)
            closing = renderer.close_reply(reply)  # "\n" after <|im_end|>: the loop adds it, the model never says it
            ids += closing
            mask += [False] * len(closing)
        else:
            delta = renderer.next_message(messages[:k], message)
            ids += delta
            mask += [False] * len(delta)
    return Sequence(instance_id, split, ids, mask, turns)


def from_trajectory(trajectory: dict[str, Any], tokenizer: Any) -> Sequence:
    """The training sequence of one trajectory JSON written by the agent loop."""
    return render(trajectory["messages"], tokenizer, trajectory["instance_id"], trajectory.get("split", ""))


def to_tensors(sequences: list[Sequence]) -> dict[str, Any]:
    """A saveable form: ids and masks as tensors, plus names and turn spans."""
    return {
        "ids": [torch.tensor(s.ids, dtype=torch.int32) for s in sequences],
        "mask": [torch.tensor(s.mask, dtype=torch.bool) for s in sequences],
        "instance_id": [s.instance_id for s in sequences],
        "split": [s.split for s in sequences],
        "turns": [s.turns for s in sequences],
    }


def from_tensors(data: dict[str, Any]) -> list[Sequence]:
    """Inverse of to_tensors."""
    return [
        Sequence(iid, split, ids.tolist(), mask.tolist(), [tuple(t) for t in turns])
        for iid, split, ids, mask, turns in zip(
            data["instance_id"], data["split"], data["ids"], data["mask"], data["turns"], strict=True
        )
    ]
