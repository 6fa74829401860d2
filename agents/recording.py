"""Record an agent's conversation with its model, and replay it turn by turn through another model.

A recording keeps, for every turn, exactly what the model was given (the prompt ids, the token budget) and
what it answered. Replaying sends the same prompts, in order, in one task (so a session reuses the prefix of
the history exactly as in the live run), and checks every reply against the recorded one: under greedy
decoding with exact acceptance the replayed model must answer token for token the same; where it does not,
the first differing position is reported and, when asked, the replay stops there (the recorded prompts that
follow assume the recorded reply). Used by the tuner's paired replay (runners/replay.py) and by the
cross-engine benchmark (bench/crossengine.py).

Stored compactly: a turn's prompt almost always extends the previous prompt and reply, so it is kept as the
length of the prefix it shares with them plus the new ids (`Conversation.to_dict`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agents.model import AgentModel, ModelReply
from engine.stats import GenerationStats


@dataclass
class Turn:
    """One agent turn: what the model was given and what it answered."""

    prompt: list[int]
    max_new_tokens: int
    reply: list[int]


@dataclass
class Conversation:
    """The turns of one task, in order."""

    instance_id: str
    turns: list[Turn] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, each prompt as (shared prefix length with the previous prompt + reply, new ids)."""
        rows, previous = [], []
        for turn in self.turns:
            shared = _common_prefix(previous, turn.prompt)
            new = turn.prompt[shared:]
            rows.append({"shared": shared, "new": new, "max_new_tokens": turn.max_new_tokens, "reply": turn.reply})
            previous = turn.prompt + turn.reply
        return {"instance_id": self.instance_id, "turns": rows}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Conversation:
        """Rebuild from `to_dict` output; ValueError when a row is not one."""
        turns, previous = [], []
        try:
            for row in data["turns"]:
                shared = int(row["shared"])
                if shared > len(previous):
                    raise ValueError(f"a turn shares {shared} tokens with a history of {len(previous)}")
                prompt = previous[:shared] + [int(t) for t in row["new"]]
                reply = [int(t) for t in row["reply"]]
                turns.append(Turn(prompt, int(row["max_new_tokens"]), reply))
                previous = prompt + reply
            return cls(str(data["instance_id"]), turns)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a recorded conversation ({type(exc).__name__}: {exc})") from None

    @property
    def generated_ids(self) -> list[int]:
        """Every reply token, in order (what the agent result's `generated_ids` holds)."""
        return [t for turn in self.turns for t in turn.reply]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class RecordingModel:
    """An AgentModel that passes every call through to another and records each turn."""

    def __init__(self, inner: AgentModel, conversation: Conversation) -> None:
        self.inner, self.conversation, self.name = inner, conversation, inner.name
        self.context_limit = getattr(inner, "context_limit", None)

    def begin(self, instance_id: str) -> None:
        """Begin the task on the inner model."""
        self.inner.begin(instance_id)

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        """The inner model's reply, recorded."""
        answer = self.inner.reply(prompt_ids, messages, max_new_tokens)
        self.conversation.turns.append(Turn(list(prompt_ids), max_new_tokens, list(answer.tokens)))
        return answer

    def end(self) -> None:
        """End the task on the inner model."""
        self.inner.end()


@dataclass
class Divergence:
    """Where a replayed reply first left the recorded one."""

    turn: int  # index of the turn
    position: int  # first differing token position inside that turn's reply
    generated_position: int  # the same position counted over every reply of the task
    recorded: int | None  # the recorded token there (None: the recorded reply ended)
    replayed: int | None  # the replayed token there (None: the replayed reply ended)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return dict(vars(self))


@dataclass
class Replayed:
    """What replaying one conversation measured."""

    stats: GenerationStats  # the model's counters summed over the replayed turns
    turns: int  # turns replayed
    turns_equal: int  # of them, replies equal to the recording
    wall_s: float  # wall seconds inside the model's replies
    cpu_s: float  # CPU seconds of the replaying thread inside them
    process_cpu_s: float  # CPU seconds of the whole process inside them (every compute thread)
    divergence: Divergence | None = None  # the first differing reply, if any
    replies: list[list[int]] = field(default_factory=list)  # the replayed replies, in order

    @property
    def identical(self) -> bool:
        """Every replayed turn equal to the recording (and none skipped)."""
        return self.divergence is None


def replay(
    model: AgentModel, conversation: Conversation, *, turns: int | None = None, stop_at_divergence: bool = False
) -> Replayed:
    """Send the recorded turns (the first `turns`, default all) through `model` in one task, timing each reply.

    `stop_at_divergence`: stop after the first reply that differs from the recording (the recorded prompts
    after it assume the recorded reply).
    """
    total, equal, replies = GenerationStats(), 0, []
    wall = cpu = process = 0.0
    divergence = None
    offset = 0
    model.begin(conversation.instance_id)
    try:
        for index, turn in enumerate(conversation.turns[:turns]):
            w0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            answer = model.reply(turn.prompt, [], turn.max_new_tokens)
            wall += time.perf_counter() - w0
            cpu += time.thread_time() - c0
            process += time.process_time() - p0
            total = total + (answer.stats or GenerationStats())
            replies.append(list(answer.tokens))
            position = first_divergence(turn.reply, answer.tokens)
            if position is None:
                equal += 1
            elif divergence is None:
                divergence = Divergence(
                    turn=index,
                    position=position,
                    generated_position=offset + position,
                    recorded=turn.reply[position] if position < len(turn.reply) else None,
                    replayed=answer.tokens[position] if position < len(answer.tokens) else None,
                )
                if stop_at_divergence:
                    break
            offset += len(turn.reply)
    finally:
        model.end()
    return Replayed(total, len(replies), equal, wall, cpu, process, divergence, replies)


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """First position where two token streams differ (a shorter stream differs where it ends); None if equal."""
    n = _common_prefix(a, b)
    return None if n == len(a) == len(b) else n
