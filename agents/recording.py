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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agents.model import AgentModel, ModelReply
from common.errors import ConfigError
from engine.stats import GenerationStats

T = TypeVar("T")
CLOCKS = ("wall", "cpu", "process_cpu", "gpu")  # what TurnClock measures (gpu on CUDA only)


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
                    raise ConfigError(f"a turn shares {shared} tokens with a history of {len(previous)}")
                prompt = previous[:shared] + [int(t) for t in row["new"]]
                reply = [int(t) for t in row["reply"]]
                turns.append(Turn(prompt, int(row["max_new_tokens"]), reply))
                previous = prompt + reply
            return cls(str(data["instance_id"]), turns)
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"not a recorded conversation ({type(exc).__name__}: {exc})") from None

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


class PassThroughModel:
    """An AgentModel that hands every call to another one; subclasses change `reply`."""

    def __init__(self, inner: AgentModel) -> None:
        self.inner, self.name = inner, inner.name
        self.context_limit = getattr(inner, "context_limit", None)

    def begin(self, instance_id: str) -> None:
        """Begin the task on the inner model."""
        self.inner.begin(instance_id)

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        """The inner model's reply."""
        return self.inner.reply(prompt_ids, messages, max_new_tokens)

    def end(self) -> None:
        """End the task on the inner model."""
        self.inner.end()


class RecordingModel(PassThroughModel):
    """Passes every call through to another AgentModel and records each turn."""

    def __init__(self, inner: AgentModel, conversation: Conversation) -> None:
        super().__init__(inner)
        self.conversation = conversation

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        """The inner model's reply, recorded."""
        answer = self.inner.reply(prompt_ids, messages, max_new_tokens)
        self.conversation.turns.append(Turn(list(prompt_ids), max_new_tokens, list(answer.tokens)))
        return answer


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

    stats: GenerationStats = field(default_factory=GenerationStats)  # the model's counters, summed over turns
    turns: int = 0  # turns replayed
    turns_equal: int = 0  # of them, replies equal to the recording
    clocks: dict[str, float] = field(default_factory=dict)  # seconds inside the replies by clock (CLOCKS)
    divergence: Divergence | None = None  # the first differing reply, if any
    replies: list[list[int]] = field(default_factory=list)  # the replayed replies, in order

    @property
    def identical(self) -> bool:
        """Every replayed turn equal to the recording."""
        return self.divergence is None

    @property
    def generated_ids(self) -> list[int]:
        """Every replayed reply token, in order."""
        return [t for reply in self.replies for t in reply]


class TurnClock:
    """Seconds spent inside model replies, on several clocks at once (CLOCKS).

    wall: elapsed time; cpu: CPU time of the calling thread (the one that generates); process_cpu: CPU time of
    every thread of the process (torch's compute threads included); gpu: CUDA event time on the current stream
    (only with `cuda=True`). Under contention from other processes wall time grows while CPU time barely does.
    """

    def __init__(self, cuda: bool = False) -> None:
        self.cuda = cuda
        self.totals: dict[str, float] = dict.fromkeys(("wall", "cpu", "process_cpu", *(("gpu",) if cuda else ())), 0.0)

    def time(self, call: Callable[[], T]) -> T:
        """Run `call`, adding its duration to every clock."""
        events = None
        if self.cuda:
            import torch

            events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            events[0].record()
        w0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
        try:
            return call()
        finally:
            self.totals["wall"] += time.perf_counter() - w0
            self.totals["cpu"] += time.thread_time() - c0
            self.totals["process_cpu"] += time.process_time() - p0
            if events is not None:
                events[1].record()
                events[1].synchronize()
                self.totals["gpu"] += events[0].elapsed_time(events[1]) / 1000.0


class ClockedModel(PassThroughModel):
    """Passes every call through to another AgentModel and times its replies on every clock."""

    def __init__(self, inner: AgentModel, clock: TurnClock) -> None:
        super().__init__(inner)
        self.clock = clock

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        """The inner model's reply, timed."""
        return self.clock.time(lambda: self.inner.reply(prompt_ids, messages, max_new_tokens))


class Replayer:
    """One model replaying one recorded conversation, a turn at a time (so two replayers can take turns)."""

    def __init__(self, model: AgentModel, conversation: Conversation, *, cuda: bool = False) -> None:
        self.model, self.conversation = model, conversation
        self.clock = TurnClock(cuda)
        self.result = Replayed(clocks=self.clock.totals)
        self._offset = 0  # reply tokens of the turns before the next one

    def begin(self) -> None:
        """Start the task (a fresh session)."""
        self.model.begin(self.conversation.instance_id)

    def step(self, index: int) -> bool:
        """Replay turn `index` (turns go in order); True when its reply equals the recording."""
        turn = self.conversation.turns[index]
        answer = self.clock.time(lambda: self.model.reply(turn.prompt, [], turn.max_new_tokens))
        r = self.result
        r.stats = r.stats + (answer.stats or GenerationStats())
        r.replies.append(list(answer.tokens))
        r.turns += 1
        position = first_divergence(turn.reply, answer.tokens)
        if position is None:
            r.turns_equal += 1
        elif r.divergence is None:
            r.divergence = Divergence(
                turn=index,
                position=position,
                generated_position=self._offset + position,
                recorded=turn.reply[position] if position < len(turn.reply) else None,
                replayed=answer.tokens[position] if position < len(answer.tokens) else None,
            )
        self._offset += len(turn.reply)
        return position is None

    def end(self) -> None:
        """End the task (the session and its KV are released)."""
        self.model.end()


def replay(
    model: AgentModel, conversation: Conversation, *, turns: int | None = None, stop_at_divergence: bool = False
) -> Replayed:
    """Send the recorded turns (the first `turns`, default all) through `model` in one task, timing each reply.

    `stop_at_divergence`: stop after the first reply that differs from the recording (the recorded prompts
    after it assume the recorded reply).
    """
    replayer = Replayer(model, conversation)
    replayer.begin()
    try:
        for index in range(len(conversation.turns[:turns])):
            if not replayer.step(index) and stop_at_divergence:
                break
    finally:
        replayer.end()
    return replayer.result


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """First position where two token streams differ (a shorter stream differs where it ends); None if equal."""
    n = _common_prefix(a, b)
    return None if n == len(a) == len(b) else n
