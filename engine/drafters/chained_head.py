"""Drafters whose proposals come from a trained head chained over the target's own hidden states (`mtp`, `eagle3`).

The head (engine/heads.py ChainedHead: the MTP module, the EAGLE-3 head) is shared by every session; the
drafter keeps, per session, the target's tapped hidden states of every position it has seen (commit()
receives them: the loop asks for the drafter's `Needs.taps`) and the head's layer KV cache. An entry of
that cache at position t reads (the head's row for t, x_{t+1}); before proposing, entries for the positions
the target verified since are appended in one layer forward, whose last output gives the first draft
token, and the chain goes on from the layer's own output and each proposed token. Chain entries are cut
off at the next proposal, which rolls back rejections.

The first step of a turn proposes nothing: the target has not yet seen the turn's new tokens, so there
is no hidden state for the last one (prefill and that first verification share one forward). A
history that diverged from the one the states were computed on keeps only the common prefix's.

In a batch (engine/batch.py) the ready sessions of one head chain together (`propose_many`): every chain
step is one layer forward over all of them (ChainedHead.step_many: the first also appends each session's
catch-up entries) and one LM head over their outputs, instead of one of each per session.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from common.errors import UnsupportedConfig
from engine.drafters.base import (
    Draft,
    DraftContext,
    DrafterBase,
    DrafterResources,
    Verified,
    propose_grouped,
)
from engine.kv import common_prefix, grown_capacity
from engine.sampling import effective_probs, greedy_ids, sample

if TYPE_CHECKING:
    from engine.heads import ChainedHead, HeadCache


class ChainedHeadDrafter(DrafterBase):
    """A trained head chained over the target's hidden states; a subclass names its resource and taps."""

    RESOURCE = "?"  # the DrafterResources field holding the head
    MISSING = "?"  # the one line when the engine was given no head

    def __init__(self, options: Any, resources: DrafterResources) -> None:
        head: ChainedHead | None = getattr(resources, self.RESOURCE)
        if head is None:
            raise UnsupportedConfig(self.MISSING)
        super().__init__(options, resources)
        self.module = head
        self.needs = self.needs_with(head)
        self._cache = self.module.new_cache()
        self._hidden = head.anchor().new_empty((0, head.stored_width))  # [capacity, k h]: tapped states per position
        self._known = 0  # positions [0, _known) of _hidden are valid for _seen
        self._seen: list[int] = []  # the history the hidden states belong to
        self._entries = 0  # block cache entries [0, _entries) are right for _seen (later ones: a chain's)

    def needs_with(self, head: ChainedHead) -> Any:
        """This instance's needs once its head is known (the taps it reads)."""
        return self.needs

    def begin(self, history: list[int]) -> None:
        """Keep only what the common prefix with the new history determines."""
        same = common_prefix(self._seen, history)
        self._known = min(self._known, same)  # h_t depends on tokens <= t
        self._entries = max(0, min(self._entries, same - 1, self._known))  # entry t also reads token t + 1
        self._seen = list(history)

    def commit(self, step: Verified) -> None:
        """Store the target's hidden states of the positions this step verified."""
        self._seen = list(step.history)
        hidden = step.columns(self.needs.taps)
        if hidden is None:
            return
        start, rows = step.hidden_start, hidden.shape[0]
        if start > self._known:  # a gap the loop never leaves; drop what would be misaligned
            return
        end = start + rows
        if end > self._hidden.shape[0]:
            grown = self._hidden.new_empty((grown_capacity(self._hidden.shape[0], end), self._hidden.shape[1]))
            grown[: self._known] = self._hidden[: self._known]
            self._hidden = grown
        self._hidden[start:end] = hidden
        self._known = end
        self._entries = min(self._entries, start)

    def propose(self, ctx: DraftContext) -> Draft:
        """Chain the module from the last verified position: up to ctx.max_tokens after history + prefix."""
        if not self._ready(ctx):
            return Draft()  # the first step of a turn: no hidden state for the last token yet
        module = self.module
        cache, rows, feed = self._catch_up(ctx)
        g = module.step(cache, module.entry_rows(rows), feed)[-1:]  # [1, h]
        forced = list(ctx.prefix)  # tokens another drafter proposed: chain through them, propose after
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        with torch.inference_mode():
            while True:
                if forced:
                    tok = forced.pop(0)
                else:
                    tok = self._choose(module.head_logits(g), ctx, probs)
                    if tok is None:
                        break
                    tokens.append(tok)
                    if len(tokens) == ctx.max_tokens:
                        break
                g = module.step(cache, g, [tok])
        return self._draft(tokens, probs, ctx)

    @classmethod
    def propose_many(cls, drafters: Sequence[ChainedHeadDrafter], contexts: Sequence[DraftContext]) -> list[Draft]:
        """Every session's `propose`, each chain step one layer forward (ChainedHead.step_many) and one head over all.

        Sessions of one head chain together; each keeps its own block cache, catch-up entries, forced prefix,
        budget, confidence stop and generator, so each gets the draft it would get alone (up to the batched
        linears' rounding).
        """
        return propose_grouped(
            drafters,
            contexts,
            lambda drafter: drafter.module,
            _chain_together,
            lambda drafter, ctx: drafter._ready(ctx),
        )

    def _ready(self, ctx: DraftContext) -> bool:
        """Whether the target's hidden state of the last history token is known (not on a turn's first step)."""
        n = len(ctx.history)
        return n >= 2 and self._known >= n - 1

    def _catch_up(self, ctx: DraftContext) -> tuple[HeadCache, torch.Tensor, list[int]]:
        """The block cache cropped for this proposal, and the entries to append first (hidden rows, next tokens)."""
        n = len(ctx.history)
        # Entries for positions [first, n - 1), at least one so the last output is fresh.
        first = min(self._entries, n - 2)
        self._cache.crop(first)
        self._entries = n - 1
        return self._cache, self._hidden[first : n - 1], ctx.history[first + 1 : n]

    def _draft(self, tokens: list[int], probs: list[torch.Tensor], ctx: DraftContext) -> Draft:
        stacked = torch.stack(probs) if probs and not ctx.params.greedy else None
        return Draft(tokens=tokens, probs=stacked, sources=[self.name] * len(tokens))

    def _choose(self, draft_logits: torch.Tensor, ctx: DraftContext, probs: list[torch.Tensor]) -> int | None:
        """The next draft token (None: stop, the head's confidence is below the threshold, decided before sampling)."""
        module = self.module
        if ctx.params.greedy:
            logits = draft_logits[0]
            if ctx.confidence is not None and float(logits.float().softmax(-1).max()) < ctx.confidence:
                return None
            return int(module.to_target_ids(greedy_ids(logits)))
        q = effective_probs(module.full_logits(draft_logits)[0], ctx.params)  # [V_target]
        if ctx.confidence is not None and float(q.max()) < ctx.confidence:
            return None
        probs.append(q)
        return sample(q, ctx.generator)


def _chain_together(drafters: list[ChainedHeadDrafter], contexts: list[DraftContext]) -> list[Draft]:
    """`propose` of ready drafters sharing one module: per chain step one block forward and one head for all left.

    The first block forward appends each session's own catch-up entries (ragged); a session leaves the chain
    at its budget or its confidence stop, and chains through its forced prefix without proposing.
    """
    module = drafters[0].module
    caches, rows, feeds = zip(*(d._catch_up(ctx) for d, ctx in zip(drafters, contexts, strict=True)), strict=True)
    g = module.step_many(list(caches), module.entry_rows(torch.cat(rows)), list(feeds))
    last = torch.tensor(list(itertools.accumulate(len(f) for f in feeds)), device=g.device) - 1
    g = g[last]  # [m, h]: each session's freshest block output, rows in `chaining` order
    forced = [list(ctx.prefix) for ctx in contexts]
    tokens: list[list[int]] = [[] for _ in drafters]
    probs: list[list[torch.Tensor]] = [[] for _ in drafters]
    chaining = list(range(len(drafters)))
    with torch.inference_mode():
        while True:
            proposing = [r for r, j in enumerate(chaining) if not forced[j]]
            # one head over every proposing session's output, its rows [1, Vd] taken in `chaining` order
            heads = iter(module.head_logits(g[proposing]).split(1) if proposing else ())
            kept, fed = [], []
            for r, j in enumerate(chaining):
                if forced[j]:
                    tok = forced[j].pop(0)
                else:
                    tok = drafters[j]._choose(next(heads), contexts[j], probs[j])
                    if tok is None:
                        continue
                    tokens[j].append(tok)
                    if len(tokens[j]) == contexts[j].max_tokens:
                        continue
                kept.append(r)
                fed.append([tok])
            if not kept:
                break
            g = module.step_many([caches[chaining[r]] for r in kept], g[kept], fed)
            chaining = [chaining[r] for r in kept]
    return [d._draft(tokens[j], probs[j], ctx) for j, (d, ctx) in enumerate(zip(drafters, contexts, strict=True))]
