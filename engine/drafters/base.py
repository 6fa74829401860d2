"""The drafter Protocol: what every drafter implements, and what it is given.

A drafter instance belongs to one session (its state: indexes, a draft KV cache); resources shared
by all sessions of an engine (draft weights, the cross-generation suffix index, the target model
for self-speculation) arrive through `DrafterResources`. Not here: acceptance, the decode loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from engine.sampling import SamplingParams

if TYPE_CHECKING:
    from engine.drafters.suffix_index import SuffixIndex
    from engine.loading import LoadedModel


@dataclass
class DraftContext:
    """What a drafter may read when proposing."""

    history: list[int]  # full token history; the target processes history[-1] next
    max_tokens: int  # propose at most this many tokens (>= 1)
    params: SamplingParams  # the target's sampling transform; model drafters return q under it
    generator: torch.Generator | None  # the session's RNG, for sampling drafters
    confidence: float | None = None  # model drafters stop when a token's probability is below it
    target_hidden: torch.Tensor | None = None  # [h] target's last hidden state (MTP drafters)


@dataclass
class Draft:
    """A proposal: tokens, their draft distributions, and who proposed each."""

    tokens: list[int] = field(default_factory=list)
    probs: torch.Tensor | None = None  # [n, V_target] effective q; None: deterministic (one-hot q)
    sources: list[str] = field(default_factory=list)  # drafter credited for each token
    limited: bool = False  # True: nothing proposed because the drafter's own context limit was reached


@dataclass
class DrafterResources:
    """Engine-wide objects drafters may share across sessions."""

    target: LoadedModel
    draft: LoadedModel | None = None  # the draft model of `draft_model`
    suffix_index: SuffixIndex | None = None  # finished generations, for `suffix` with scope=engine
    extra: dict[str, Any] = field(default_factory=dict)


class Drafter(Protocol):
    """Proposes draft tokens; tracks the session history it drafts from."""

    name: str
    needs_target_hidden: bool  # True: the loop passes the target's last hidden state (MTP)
    is_model: bool  # True: proposals come from a model with a distribution q (confidence applies)

    def begin(self, history: list[int]) -> None:
        """A generation starts; `history` is the session's full history (may diverge from before)."""
        ...

    def propose(self, ctx: DraftContext) -> Draft:
        """Up to ctx.max_tokens tokens that likely follow ctx.history (may be empty)."""
        ...

    def commit(self, history: list[int]) -> None:
        """Tokens were accepted; `history` is the new session history (drafts not kept are gone)."""
        ...

    def end(self, history: list[int], generated: list[int]) -> None:
        """The generation finished with `generated` as its new tokens."""
        ...
