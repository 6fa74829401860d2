"""What the agent loop talks to: a model that continues a conversation held as token ids.

Two kinds implement it: `EngineModel` (agents/engine_model.py), backed by one engine session per
task so every turn reuses the KV of the history, and scripted stand-ins (agents/expert/, test
fakes) that write text and encode it with the same tokenizer. The agent never re-tokenizes what a
model returned: `tokens` go into the conversation exactly as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engine.stats import GenerationStats


@dataclass
class ModelReply:
    """One assistant turn as the model produced it."""

    tokens: list[int]  # ids exactly as generated, the end-of-turn token included when it was emitted
    text: str  # decoded reply without the end-of-turn token (what the action parser reads)
    finish_reason: str  # "eos" (end-of-turn emitted) | "length" (max_new_tokens) | "context"
    stats: GenerationStats | None = None  # engine counters of this turn; None for scripted models
    wall_s: float = 0.0  # seconds spent producing the reply


class AgentModel(Protocol):
    """A conversational model driven turn by turn by the agent loop."""

    name: str  # recorded in trajectories and predictions (model_name_or_path)

    def begin(self, instance_id: str) -> None:
        """Start a new task: forget the previous conversation (a fresh engine session)."""
        ...

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        """Continue the conversation; `prompt_ids` is the whole history ending in the assistant header.

        `messages` is the same conversation as role/content dicts: scripted models read it,
        engine-backed models use only `prompt_ids`.
        """
        ...

    def end(self) -> None:
        """The task is over: release per-task state (KV cache)."""
        ...
