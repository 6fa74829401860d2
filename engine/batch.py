"""Several sessions decoded together: each step drafts for every session, then verifies all in one forward.

Continuous batching: a decoding may join before any step and leaves when it finishes, so sessions at
different positions, with different draft lengths (or no draft this step), share every target forward.
Each session keeps its own KV cache, drafter state, draft-length policy, RNG and acceptance; the batch
only gathers their fed tokens into one ragged forward (`forward.many`, engine/llama.py) and hands each its
own rows. Drafting is batched too where the drafter allows it (`propose_together`: the sessions of one draft
model or MTP module run one draft forward per chain step). So a session's stream is the one it would make
alone wherever the forward's rows do not depend on the batch (float64: tested token for token in
tests/engine/test_batched_conformance.py); in a model's own dtype, batch-dependent rounding can flip a near
tie, which the benchmarks count as diverged streams.

Every active decoding advances one step per batch step, so none starves; `max_sessions` bounds how many
share a step (the rest wait in arrival order, engine/scheduler.py).
"""

from __future__ import annotations

import torch

from engine.decode import Decoding, GenerationResult, Runtime
from engine.drafters import Draft, DraftContext, Drafter
from engine.drafters.base import tap_columns


class Batch:
    """The decodings stepped together through one target forward per step."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.active: list[Decoding] = []

    def __len__(self) -> int:
        return len(self.active)

    def join(self, decoding: Decoding) -> None:
        """Add a decoding; it takes part from the next step on."""
        if any(d.session is decoding.session for d in self.active):
            raise ValueError("a session already decoding in this batch cannot join it twice")
        if decoding.done:
            raise ValueError("a finished decoding cannot join a batch")
        self.active.append(decoding)

    @torch.inference_mode()
    def step(self) -> list[Decoding]:
        """One step for every active decoding (one target forward); returns those that finished and left."""
        if not self.active:
            return []
        active = self.active
        contexts = [d.draft_context() for d in active]
        drafts = propose_together([d.session.drafter for d in active], contexts)
        feeds = [d.take_draft(draft) for d, draft in zip(active, drafts, strict=True)]
        taps = tuple(dict.fromkeys(t for d in active for t in d.taps))  # every session's, once
        rows = self.runtime.forward.many(
            [d.session.cache for d in active], feeds, [d.keep for d in active], hidden=taps
        )
        for d, (logits, tapped) in zip(active, rows, strict=True):
            d.accept(logits, tap_columns(tapped, taps, d.taps))
        self.active = [d for d in active if not d.done]
        return [d for d in active if d.done]


def propose_together(drafters: list[Drafter], contexts: list[DraftContext | None]) -> list[Draft]:
    """Each session's draft (an empty one where its context is None), every drafter class asked once.

    The drafters are grouped by class and each group's `propose_many` proposes for all its sessions: where
    the class batches (draft_model, layer_skip, mtp) that is one draft forward per chain step for the group.
    """
    drafts = [Draft() for _ in drafters]
    groups: dict[type, list[int]] = {}
    for i, (drafter, ctx) in enumerate(zip(drafters, contexts, strict=True)):
        if ctx is not None:
            groups.setdefault(type(drafter), []).append(i)
    for cls, members in groups.items():
        proposed = cls.propose_many([drafters[i] for i in members], [contexts[i] for i in members])
        for i, draft in zip(members, proposed, strict=True):
            drafts[i] = draft
    return drafts


def decode_together(runtime: Runtime, decodings: list[Decoding]) -> list[GenerationResult]:
    """Run `decodings` to the end in one batch; their results in the given order."""
    batch = Batch(runtime)
    for d in decodings:
        batch.join(d)
    while batch.active:
        batch.step()
    return [d.result() for d in decodings]
