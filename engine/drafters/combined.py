"""Combined drafters `A+B` (e.g. `mtp+ngram`): several drafters behind one, each token credited to its proposer.

Lookup drafters (no distribution: ngram, suffix) propose only on a match and cost next to nothing, so
they are asked first; model drafters (draft_model, mtp, layer_skip) after them. Policies:

    first    the first child that proposes anything wins (llama.cpp's first-wins over several
             --spec-type): an n-gram proposal when its match is at least its min_match, else the model's
    extend   the first lookup proposal, then the first model child continues it up to the step's
             budget (it reads history + that prefix); with no lookup proposal, the model's own. An
             n-gram copies up to the whole budget unless capped (`ngram.max_draft`, llama.cpp's size-m),
             so give it a cap below gamma for the model to have room

Both are exact: which child proposes depends only on the history. Under sampling a mixed draft carries
one-hot q rows for the lookup tokens (ExactAcceptance with a one-hot q is the deterministic rule).
Every child sees every begin / commit / end, whether it proposed or not, so its state stays in sync.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F

from common.errors import ConfigError
from engine.drafters.base import Draft, DraftContext, DrafterBase, DrafterResources, Needs, Verified

POLICIES = ("first", "extend")
COMBINED_KEYS = ("policy",)  # the combination's own (plain) option keys


@dataclass
class CombinedOptions:
    """Options of a combined drafter: its policy, and each child's own options (set by the registry)."""

    policy: str = "first"  # first | extend (module docstring)
    children: dict[str, Any] = field(default_factory=dict)  # child name -> its options object, in name order
    classes: dict[str, type] = field(default_factory=dict)  # child name -> its drafter class (the registry's)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(f"unknown combined policy {self.policy!r}; allowed: {list(POLICIES)}")

    def with_children(self, children: dict[str, Any], classes: dict[str, type]) -> CombinedOptions:
        """These options with the children's options and drafter classes set (the registry hands both down, so
        this module never imports the registry that imports it)."""
        return replace(self, children=dict(children), classes={name: classes[name] for name in children})


class _SharedStates:
    """The children's engine-wide states, reset together."""

    def __init__(self, states: dict[str, Any]) -> None:
        self.states = states

    def reset(self) -> None:
        """Reset every child's state."""
        for state in self.states.values():
            if state is not None:
                state.reset()


class CombinedDrafter(DrafterBase):
    """Several drafters behind one name; see the module docstring."""

    def __init__(self, options: CombinedOptions, resources: DrafterResources) -> None:
        super().__init__(options, resources)
        self.name = "+".join(options.children)
        shared = resources.shared.states if isinstance(resources.shared, _SharedStates) else {}
        classes = options.classes
        self.children = [
            cls(options.children[name], replace(resources, shared=shared.get(name))) for name, cls in classes.items()
        ]
        self.lookups = [c for c in self.children if not c.needs.distribution]
        self.models = [c for c in self.children if c.needs.distribution]
        for child in self.children:  # a child's instance may need more than its class says (eagle3: its head's taps)
            self.needs = self.needs | child.needs

    @classmethod
    def needs_for(cls, options: CombinedOptions) -> Needs:
        """The union of the children's needs."""
        needs = Needs()
        for name, child in options.classes.items():
            needs = needs | child.needs_for(options.children[name])
        return needs

    @classmethod
    def state_bytes_per_token(cls, options: CombinedOptions, target: Any, dtype: str) -> float:
        """Every child keeps its own state: the sum."""
        return sum(c.state_bytes_per_token(options.children[n], target, dtype) for n, c in options.classes.items())

    @classmethod
    def shared_state(cls, options: CombinedOptions) -> _SharedStates:
        """Each child's engine-wide state."""
        return _SharedStates({n: c.shared_state(options.children[n]) for n, c in options.classes.items()})

    def begin(self, history: list[int]) -> None:
        """Every child begins."""
        for child in self.children:
            child.begin(history)

    # propose_many stays DrafterBase's (one session at a time): which child proposes, and with what prefix,
    # differs per session, so the model child's forwards would have to be batched across policy branches.

    def propose(self, ctx: DraftContext) -> Draft:
        """The policy's proposal (module docstring)."""
        limited = False
        head = Draft()
        for child in self.lookups:
            head = child.propose(ctx)
            limited |= head.limited
            if head.tokens:
                break
        if (self.options.policy == "first" and head.tokens) or not self.models:
            return head if head.tokens else Draft(limited=limited)
        room = ctx.max_tokens - len(head.tokens)
        tail = Draft()
        if room > 0:
            tail = self.models[0].propose(replace(ctx, max_tokens=room, prefix=[*ctx.prefix, *head.tokens]))
            limited |= tail.limited
        if not tail.tokens and self.options.policy == "first":
            for child in self.models[1:]:  # first-wins goes on down the list
                tail = child.propose(ctx)
                limited |= tail.limited
                if tail.tokens:
                    break
        tokens = [*head.tokens, *tail.tokens]
        if not tokens:
            return Draft(limited=limited)
        return Draft(tokens, self._probs(head, tail), [*head.sources, *tail.sources])

    def _probs(self, head: Draft, tail: Draft) -> torch.Tensor | None:
        """q rows of head + tail: None when both are deterministic, else one-hot rows for the deterministic part."""
        if head.probs is None and tail.probs is None:
            return None
        rows = [
            part.probs if part.probs is not None else self._one_hot(part.tokens, like)
            for part, like in ((head, tail.probs), (tail, head.probs))
            if part.tokens
        ]
        return torch.cat(rows)

    def _one_hot(self, tokens: list[int], like: torch.Tensor) -> torch.Tensor:
        return F.one_hot(torch.tensor(tokens, device=like.device), like.shape[-1]).to(like.dtype)

    def commit(self, step: Verified) -> None:
        """Every child commits (they keep their state in sync whoever proposed)."""
        for child in self.children:
            child.commit(step)

    def end(self, history: list[int], generated: list[int]) -> None:
        """Every child ends."""
        for child in self.children:
            child.end(history, generated)
