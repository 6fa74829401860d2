"""ScriptedModel: an AgentModel that replies with given texts, for tests (never for measurement).

Each reply is encoded with the task's tokenizer and closed with the template's end-of-turn ids,
as a chat model would emit them; an exception in the script is raised instead of replying, so
tests can crash a task at a chosen turn.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agents.model import ModelReply
from agents.prompts import ChatRenderer


class ScriptedModel:
    """Replies from a script of texts (or exceptions to raise), one per turn."""

    def __init__(
        self,
        replies: Iterable[str | BaseException],
        tokenizer: Any,
        *,
        name: str = "scripted",
        end_ids: list[int] | None = None,
        context_limit: int | None = None,
    ) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.context_limit = context_limit  # None: no limit of its own
        self.lossy = False
        self._replies = iter(replies)
        if end_ids is None:  # the template decides what ends a turn
            end_ids = ChatRenderer(tokenizer).end_of_turn_ids
        self.end_ids = list(end_ids)
        self.prompts: list[list[int]] = []  # every prompt received, for tests of the id bookkeeping
        self.instance_id: str | None = None

    def begin(self, instance_id: str) -> None:
        """Start a task (the script continues where it was)."""
        self.instance_id = instance_id

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        """The next scripted text as tokens, cut at max_new_tokens like a real model."""
        self.prompts.append(list(prompt_ids))
        try:
            item = next(self._replies)
        except StopIteration:
            raise RuntimeError("the scripted model ran out of replies") from None
        if isinstance(item, BaseException):
            raise item
        body = list(self.tokenizer.encode(item, add_special_tokens=False))
        tokens = body + self.end_ids
        finish = "eos"
        if len(tokens) > max_new_tokens:
            tokens, body, finish = tokens[:max_new_tokens], body[:max_new_tokens], "length"
        text = self.tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return ModelReply(tokens=tokens, text=text, finish_reason=finish)

    def end(self) -> None:
        """Nothing to release."""
        self.instance_id = None
