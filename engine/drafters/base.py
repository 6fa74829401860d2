"""The drafter Protocol (v2): what every drafter implements, what it is given, and what it needs.

A drafter instance belongs to one session (its state: indexes, a draft KV cache, an MTP block's
cache); resources shared by all sessions of an engine (draft weights, MTP weights, engine-wide state
such as the suffix drafter's index of finished generations, the target model for self-speculation)
arrive through `DrafterResources`. What a drafter needs from the engine is declared per instance
(`Needs`, from the class hook `needs_for(options)`), so a combined drafter needs the union of its
children's needs. Not here: acceptance, the decode loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from engine.llama import TRUNK
from engine.sampling import SamplingParams

if TYPE_CHECKING:
    from engine.drafters.token_bridge import TokenBridge
    from engine.eagle3 import Eagle3Module
    from engine.loading import LoadedModel
    from engine.mtp import MtpModule


@dataclass(frozen=True)
class Needs:
    """What a drafter needs from the engine and the decode loop."""

    # Target hidden states commit() gets for every position it added: engine.llama tap ids (i: the input of
    # decoder layer i; TRUNK: the last layer's output, before the final norm). Empty: none.
    taps: tuple[int, ...] = ()
    distribution: bool = False  # proposals come from a model with a distribution q (the confidence policy applies)
    draft_model: bool = False  # the engine must be given a draft model
    mtp: bool = False  # the engine must be given MTP weights
    eagle3: bool = False  # the engine must be given an EAGLE-3 head
    # a draft only llama-server runs (DFlash / DSpark GGUF, server.dflash_gguf): spectune's engine refuses it
    server_draft: bool = False

    @property
    def target_hidden(self) -> bool:
        """Whether commit() gets target hidden states."""
        return bool(self.taps)

    def __or__(self, other: Needs) -> Needs:
        """The union: what either needs (taps in first-seen order)."""
        names = ("distribution", "draft_model", "mtp", "eagle3", "server_draft")
        flags = {k: getattr(self, k) or getattr(other, k) for k in names}
        return Needs(taps=tuple(dict.fromkeys(self.taps + other.taps)), **flags)


@dataclass
class DraftContext:
    """What a drafter may read when proposing."""

    history: list[int]  # the session's committed history; the target processes history[-1] next
    max_tokens: int  # propose at most this many tokens (>= 1)
    params: SamplingParams  # the target's sampling transform; model drafters return q under it
    generator: torch.Generator | None  # the session's RNG, for sampling drafters
    confidence: float | None = None  # model drafters stop when a token's probability is below it
    # Tokens another drafter already proposed this step (a combined drafter's `extend` policy): continue
    # after history + prefix. Only drafters with a distribution are asked to continue a prefix.
    prefix: list[int] = field(default_factory=list)


@dataclass
class Draft:
    """A proposal: tokens, their draft distributions, and who proposed each."""

    tokens: list[int] = field(default_factory=list)
    # [n, V_target] effective q per token; None: every token deterministic (one-hot q). A draft mixing
    # deterministic and sampled tokens carries one-hot rows for the deterministic ones.
    probs: torch.Tensor | None = None
    sources: list[str] = field(default_factory=list)  # drafter credited for each token
    limited: bool = False  # True: nothing proposed because the drafter's own context limit was reached


@dataclass(frozen=True)
class Verified:
    """What one target forward established; passed to commit().

    `hidden` (only for drafters that need taps) holds the target's tapped hidden states, the taps `taps`
    side by side, for the positions [hidden_start, len(history) - 1) that the target's KV cache gained
    this step: the prompt suffix a turn's first forward prefilled, the last token, and the accepted draft
    tokens. The row of position t pairs with the token history[t + 1]. `columns(taps)` picks a drafter's own.
    """

    history: list[int]  # the session history after this step (rejected drafts are gone)
    added: int  # tokens this step appended to the history (accepted drafts + the correction / bonus)
    hidden: torch.Tensor | None = None  # [len(history) - 1 - hidden_start, len(taps) h]
    hidden_start: int = 0  # position of hidden's first row
    taps: tuple[int, ...] = (TRUNK,)  # which tap each h-wide block of `hidden` is (Needs.taps of the session's drafter)

    def columns(self, taps: tuple[int, ...]) -> torch.Tensor | None:
        """The rows of `hidden` restricted to `taps`, side by side in that order (None: no hidden states)."""
        return tap_columns(self.hidden, self.taps, taps)


def tap_columns(hidden: torch.Tensor | None, have: tuple[int, ...], want: tuple[int, ...]) -> torch.Tensor | None:
    """The h-wide blocks of `hidden` (taps `have` side by side) for the taps `want`, in that order."""
    if hidden is None or not want:
        return None
    if want == have:
        return hidden
    width = hidden.shape[1] // len(have)
    return torch.cat([hidden[:, have.index(t) * width : (have.index(t) + 1) * width] for t in want], dim=1)


@dataclass
class DrafterResources:
    """Engine-wide objects drafters may share across sessions."""

    target: LoadedModel
    draft: LoadedModel | None = None  # the draft model of `draft_model`
    mtp: MtpModule | None = None  # the MTP weights of `mtp`
    eagle3: Eagle3Module | None = None  # the EAGLE-3 head of `eagle3`
    shared: Any = None  # engine-wide drafter state: what the drafter class's shared_state() returned
    # draft_model with a draft whose tokenizer differs from the target's: the pair's TokenBridge, else None
    bridge: TokenBridge | None = None


class Drafter(Protocol):
    """Proposes draft tokens; tracks the session history it drafts from.

    Class hooks besides the methods below (engine/drafters/__init__.py calls them):
    `needs_for(options) -> Needs` and `shared_state(options) -> object with reset() | None`; and the
    batch's (engine/batch.py) `propose_many(drafters, contexts) -> list[Draft]`: the proposals of several
    sessions' drafters of the class in one go, each what its `propose` would return.
    """

    name: str
    needs: Needs  # per instance: a combined drafter's is the union of its children's

    def begin(self, history: list[int]) -> None:
        """A generation starts; `history` is the session's full history (may diverge from before)."""
        ...

    def propose(self, ctx: DraftContext) -> Draft:
        """Up to ctx.max_tokens tokens that likely follow ctx.history + ctx.prefix (may be empty)."""
        ...

    def commit(self, step: Verified) -> None:
        """The target verified a step; `step.history` is the new session history (drafts not kept are gone)."""
        ...

    def end(self, history: list[int], generated: list[int]) -> None:
        """The generation finished with `generated` as its new tokens."""
        ...


class DrafterBase:
    """Defaults for the class hooks and the no-op methods; a drafter overrides what it uses."""

    name = "?"
    NEEDS = Needs()

    def __init__(self, options: Any, resources: DrafterResources) -> None:
        self.options = options
        self.needs = type(self).needs_for(options)

    @classmethod
    def needs_for(cls, options: Any) -> Needs:
        """What an instance with `options` needs (the class's NEEDS unless options change it)."""
        return cls.NEEDS

    @classmethod
    def shared_state(cls, options: Any) -> Any:
        """Engine-wide state the engine creates once and gives every session's drafter (None: none)."""
        return None

    @classmethod
    def state_bytes_per_token(cls, options: Any, target: Any, dtype: str) -> float:
        """Bytes of the drafter's own per-position state for a target of shape `target` (engine.memory.ModelShape).

        What the memory model counts over the context beside the target's KV: a draft model's KV is
        counted from its own shape, so only drafters with state of their own override this.
        """
        return 0.0

    @classmethod
    def propose_many(cls, drafters: Sequence[Drafter], contexts: Sequence[DraftContext]) -> list[Draft]:
        """Each drafter's proposal for its context (drafters of this class, one per session), in order.

        The default asks each drafter's `propose` in turn; a drafter whose proposals can share work across
        sessions (one draft forward for all: draft_model, mtp) overrides it, and must return what each
        `propose` would.
        """
        return [drafter.propose(ctx) for drafter, ctx in zip(drafters, contexts, strict=True)]

    def begin(self, history: list[int]) -> None:
        """Nothing to prepare."""

    def commit(self, step: Verified) -> None:
        """Nothing to track."""

    def end(self, history: list[int], generated: list[int]) -> None:
        """Nothing to learn."""


def propose_grouped(
    drafters: Sequence[Any],
    contexts: Sequence[DraftContext],
    shared: Callable[[Any], object],
    chain: Callable[[list[Any], list[DraftContext]], list[Draft]],
    ready: Callable[[Any, DraftContext], bool] = lambda drafter, ctx: True,
) -> list[Draft]:
    """Drafts for several sessions of one drafter class: those sharing a model (`shared(drafter)`) chain together.

    A session that is not `ready` proposes nothing this step; a group of one proposes alone (the single-session
    path as it is); a larger group goes through `chain`, which drafts for all its sessions in one forward per
    chain step. The drafts come back in the sessions' order.
    """
    drafts: list[Draft] = [Draft() for _ in drafters]
    groups: dict[int, list[int]] = {}
    for i, (drafter, ctx) in enumerate(zip(drafters, contexts, strict=True)):
        if ready(drafter, ctx):
            groups.setdefault(id(shared(drafter)), []).append(i)
    for members in groups.values():
        if len(members) == 1:
            drafts[members[0]] = drafters[members[0]].propose(contexts[members[0]])
            continue
        chained = chain([drafters[i] for i in members], [contexts[i] for i in members])
        for i, draft in zip(members, chained, strict=True):
            drafts[i] = draft
    return drafts
