"""`draft_model`: a smaller causal LM with the target's tokenizer proposes tokens.

The draft keeps its own KV cache; before each proposal it is cropped to the longest prefix it
shares with the session history, which rolls back rejected drafts without extra bookkeeping.
`config.vocab_size` may differ from the target's (embedding padding, e.g. Qwen2.5 7B vs 0.5B):
draft logits are cut or padded with -inf to the target's vocabulary. A draft with a shorter
position limit than the target's (GPT-2's learned `n_positions`, a smaller `max_position_embeddings`)
drafts only what fits below its limit, then proposes nothing: the target decodes plainly from there.

A draft with another tokenizer (the engine gives it the pair's TokenBridge) drafts in its own ids, greedily,
and its proposal is carried over as text (engine/drafters/token_bridge.py): whole target tokens, verified as a
one-hot proposal, so greedy stays plain greedy and exact sampling stays exact. Such a session drafts alone in
a batch.

In a batch (engine/batch.py) the sessions of one draft model chain together (`propose_many`): every chain
step is one ragged draft forward (`forward.many`) over the sessions still drafting, the first also feeding
each session's catch-up tokens, instead of one forward per session per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from common.errors import UnsupportedConfig
from engine.drafters.base import Draft, DraftContext, DrafterBase, DrafterResources, Needs, propose_grouped
from engine.drafters.token_bridge import BridgeState
from engine.kv import crop_cache, position_limit
from engine.sampling import effective_probs, greedy_ids, sample

# Draft steps per target token a cross-tokenizer draft may take (its tokens may be shorter than the target's).
STEPS_PER_TOKEN = 3

if TYPE_CHECKING:
    from engine.loading import LoadedModel


@dataclass
class DraftModelOptions:
    """Options of the `draft_model` drafter (the model itself comes from the engine's `draft`)."""


def fit_vocab(logits: torch.Tensor, vocab: int) -> torch.Tensor:
    """Cut or -inf-pad the last dimension of `logits` to `vocab` entries."""
    have = logits.shape[-1]
    if have == vocab:
        return logits
    if have > vocab:
        return logits[..., :vocab]
    pad = logits.new_full((*logits.shape[:-1], vocab - have), float("-inf"))
    return torch.cat([logits, pad], dim=-1)


class DraftModelDrafter(DrafterBase):
    """Autoregressive drafting with a small model."""

    name = "draft_model"
    NEEDS = Needs(distribution=True, draft_model=True)
    _bridge: BridgeState | None = None  # a draft with another tokenizer: this session's bridge (layer_skip: never)

    def __init__(self, options: DraftModelOptions | None, resources: DrafterResources) -> None:
        if resources.draft is None:
            raise UnsupportedConfig("drafter 'draft_model' needs a draft model (--draft DIR / model.draft)")
        super().__init__(options or DraftModelOptions(), resources)
        self._use(resources.draft, resources.target.vocab_size)
        self._bridge = resources.bridge.session() if resources.bridge is not None else None

    def _use(self, draft: LoadedModel, vocab: int) -> None:
        """Draft with `draft` (its forward is built once per loaded model) into the target's `vocab`."""
        self.vocab = vocab
        self._forward = draft.forward
        self._draft_vocab = draft.vocab_size
        # A (padded) target may emit an id the smaller draft cannot embed; the draft then reads a
        # stand-in token. Its drafts only get worse there: the target still verifies every token.
        self._stand_in = next(iter(sorted(draft.eos_token_ids)), 0)
        self._cache = self._forward.new_cache()
        self._limit = position_limit(draft.model)  # None: no known limit
        self._cached: list[int] = []  # tokens whose KV the draft cache holds
        self._verified = 0  # _cached[:_verified] is known to equal the session history

    def begin(self, history: list[int]) -> None:
        """The history may have diverged between generations: re-check from the start."""
        self._verified = 0
        if self._bridge is not None:
            self._bridge.begin()

    def _sync(self, history: list[int]) -> None:
        c = self._verified
        limit = min(len(self._cached), len(history) - 1)  # always recompute >= 1 token for logits
        while c < limit and self._cached[c] == history[c]:
            c += 1
        crop_cache(self._cache, c)
        del self._cached[c:]
        self._verified = c

    def room(self, history_length: int) -> int | None:
        """Draft tokens that fit below the draft's position limit after `history_length` tokens (None: no limit)."""
        if self._limit is None:
            return None
        # Drafting k tokens feeds positions up to history_length + k - 2 (the last draft token is
        # never fed), and the largest position the draft can embed is limit - 1.
        return max(0, self._limit - history_length + 1)

    def propose(self, ctx: DraftContext) -> Draft:
        """Draft up to ctx.max_tokens tokens after history + prefix; stop when the top probability < ctx.confidence."""
        if self._bridge is not None:
            return self._propose_as_text(ctx, self._bridge)
        feed, max_tokens = self._start(ctx)
        if not max_tokens:  # past the draft's limit: an empty draft makes this a plain decoding step
            return Draft(limited=True)
        tokens: list[int] = []
        probs: list[torch.Tensor] = []
        while True:
            logits, _ = self._forward(self._cache, self._ids(feed))
            self._cached.extend(feed)
            tok = self._choose(fit_vocab(logits[-1], self.vocab), ctx, probs)
            if tok is None:
                break
            tokens.append(tok)
            if len(tokens) == max_tokens:  # the last draft token is never fed
                break
            feed = [tok]
        return self._draft(tokens, probs)

    def _propose_as_text(self, ctx: DraftContext, bridge: BridgeState) -> Draft:
        """Draft greedily in the draft's own ids until they carry over to ctx.max_tokens whole target tokens."""
        got = bridge.context([*ctx.history, *ctx.prefix])
        if got is None:  # the history ends inside a character: the target's next token finishes it
            return Draft()
        context, unchanged = got
        room = self.room(len(context))
        if room == 0:
            return Draft(limited=True)
        self._verified = min(self._verified, unchanged)  # the re-encoded tail may differ from last step's
        self._sync(context)
        feed = context[len(self._cached) :]
        steps = STEPS_PER_TOKEN * ctx.max_tokens + 1
        steps = steps if room is None else min(steps, room)
        drafted: list[int] = []
        tokens: list[int] = []
        while len(drafted) < steps:
            logits, _ = self._forward(self._cache, self._ids(feed))
            self._cached.extend(feed)
            row = logits[-1][: bridge.bridge.draft_size]  # ids past the tokenizer have no text
            # Greedy whatever the sampling: the proposal is verified one-hot, where the draft's argmax is its best bet.
            if ctx.confidence is not None and float(row.float().softmax(-1).max()) < ctx.confidence:
                break
            drafted.append(int(greedy_ids(row)))
            tokens, done = bridge.bridge.to_target(drafted, ctx.max_tokens)
            if done:
                break
            feed = drafted[-1:]
        return Draft(tokens=tokens, sources=[self.name] * len(tokens))

    @classmethod
    def propose_many(cls, drafters: Sequence[DraftModelDrafter], contexts: Sequence[DraftContext]) -> list[Draft]:
        """Every session's `propose`, each chain step one draft forward (`forward.many`) over all still drafting.

        Sessions of one draft forward (one engine's draft model, or layer_skip's view of one target) chain
        together; each keeps its own draft cache, catch-up tokens, budget, confidence stop, position limit
        and generator, so each gets the draft it would get alone (up to the batched linears' rounding).
        """
        return propose_grouped(drafters, contexts, _chain_key, _chain_together)

    def _start(self, ctx: DraftContext) -> tuple[list[int], int]:
        """(tokens the draft must be fed first, most tokens to draft: 0 past its position limit), the cache synced."""
        seq = [*ctx.history, *ctx.prefix] if ctx.prefix else ctx.history  # continue after another drafter's tokens
        room = self.room(len(seq))
        if room == 0:
            return [], 0
        self._sync(seq)
        return seq[len(self._cached) :], ctx.max_tokens if room is None else min(ctx.max_tokens, room)

    def _ids(self, feed: list[int]) -> list[int]:
        """`feed` with ids the draft cannot embed replaced by its stand-in."""
        return [t if t < self._draft_vocab else self._stand_in for t in feed]

    def _choose(self, logits: torch.Tensor, ctx: DraftContext, probs: list[torch.Tensor]) -> int | None:
        """The next draft token from target-vocabulary logits [V] (None: stop, the confidence is below threshold)."""
        # Stop on the distribution's confidence *before* sampling: the decision then depends
        # only on the prefix, which keeps exact sampling exact (a rule that drops a token
        # after seeing it would bias the proposal away from q).
        if ctx.params.greedy:
            if ctx.confidence is not None and float(logits.float().softmax(-1).max()) < ctx.confidence:
                return None
            return int(greedy_ids(logits))
        q = effective_probs(logits, ctx.params)  # [V_target]
        if ctx.confidence is not None and float(q.max()) < ctx.confidence:
            return None
        probs.append(q)
        return sample(q, ctx.generator)

    def _draft(self, tokens: list[int], probs: list[torch.Tensor]) -> Draft:
        stacked = torch.stack(probs) if probs else None  # [n, V_target] when sampling
        return Draft(tokens=tokens, probs=stacked, sources=[self.name] * len(tokens))


def _chain_key(drafter: DraftModelDrafter) -> object:
    """Sessions of one draft forward chain together; one with another tokenizer drafts alone (its own key)."""
    return drafter._forward if drafter._bridge is None else drafter


def _chain_together(drafters: list[DraftModelDrafter], contexts: list[DraftContext]) -> list[Draft]:
    """`propose` of drafters sharing one draft forward, every chain step one ragged forward over the sessions left.

    A session leaves the chain when it has its budget, its confidence stop, or (from the start) no room below
    the draft's position limit; the first step also feeds each session's own catch-up tokens.
    """
    forward = drafters[0]._forward
    feeds, budgets = zip(*(d._start(ctx) for d, ctx in zip(drafters, contexts, strict=True)), strict=True)
    feeds = list(feeds)
    tokens: list[list[int]] = [[] for _ in drafters]
    probs: list[list[torch.Tensor]] = [[] for _ in drafters]
    drafting = [j for j, budget in enumerate(budgets) if budget]
    while drafting:
        caches = [drafters[j]._cache for j in drafting]
        rows = forward.many(caches, [drafters[j]._ids(feeds[j]) for j in drafting], [1] * len(drafting))
        still = []
        for j, (logits, _) in zip(drafting, rows, strict=True):
            drafter = drafters[j]
            drafter._cached.extend(feeds[j])
            tok = drafter._choose(fit_vocab(logits[-1], drafter.vocab), contexts[j], probs[j])
            if tok is None:
                continue
            tokens[j].append(tok)
            if len(tokens[j]) < budgets[j]:
                feeds[j] = [tok]
                still.append(j)
        drafting = still
    return [d._draft(tokens[j], probs[j]) if budgets[j] else Draft(limited=True) for j, d in enumerate(drafters)]
