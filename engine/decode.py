"""The decode loop: prefill, then draft -> verify -> accept -> emit -> roll back, per session.

Invariant kept between steps: the target KV cache holds exactly `history[:-1]`; the last emitted
token is fed at the head of the next verification forward together with the draft (the first
forward of a turn carries the whole unprefilled prompt suffix instead, so prefill and the first
verification share one forward):

    forward([last] + draft)  -> logits row i scores the token after draft[:i]   (n + 1 rows)
    accept a prefix of a tokens, emit draft[:a] + [next], crop the KV to len(history) - 1

so one target forward yields between 1 and n + 1 tokens. With `drafter=none` (n = 0) this is plain
decoding, which is the baseline every speculative configuration is compared against.

A generation in progress is a `Decoding`: `draft()` gives the tokens to feed, `accept()` takes the
forward's rows. `decode` steps one alone; engine/batch.py steps several sessions' decodings through one
batched forward. Either way a decoding does the same thing with its rows, so a session's stream does not
depend on who else was in the forward (exactly so where the forward's rows do not depend on the batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from engine.acceptance import AcceptanceRule
from engine.drafters import Draft, DraftContext, Verified
from engine.kv import crop_cache, kv_bytes
from engine.profile import NoClock, PhaseClock, StepProfile
from engine.sampling import SamplingParams
from engine.session import Session
from engine.stats import GenerationStats


class ContextLimitError(ValueError):
    """The prompt alone does not fit the model's context window."""


@dataclass(frozen=True)
class Runtime:
    """What decoding reads from the engine (frozen: a decode loop cannot change its engine)."""

    forward: Any  # the target's forward (engine/forward.py): (cache, tokens, keep, hidden) -> logits, hidden
    acceptance: AcceptanceRule  # the configured acceptance rule
    params: SamplingParams  # the target's sampling transform
    stop_tokens: frozenset[int]  # default stop tokens (the target's EOS ids)
    context_limit: int  # positions the target can embed
    device: torch.device  # where the target runs
    drafter: str  # the configured drafter's name (results carry it)
    acceptance_name: str  # the configured acceptance rule's name
    resident_bytes: int  # weights + packed copies: the CPU estimate of peak memory before the KV


@dataclass
class GenerationResult:
    """New tokens of one generation and how they were produced."""

    tokens: list[int]
    finish_reason: str  # "eos" (a stop token was emitted), "length" (max_new_tokens), "context"
    stats: GenerationStats
    drafter: str
    acceptance: str
    lossy: bool  # True when a lossy acceptance rule may have changed the output
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready summary (stats with derived values; `lossy` always present)."""
        return {
            "tokens": list(self.tokens),
            "finish_reason": self.finish_reason,
            "drafter": self.drafter,
            "acceptance": self.acceptance,
            "lossy": self.lossy,
            "stats": self.stats.to_dict(),
        }


def _cut_at_stop(tokens: list[int], stop: frozenset[int]) -> tuple[list[int], bool]:
    for j, tok in enumerate(tokens):
        if tok in stop:
            return tokens[: j + 1], True
    return tokens, False


class Decoding:
    """One generation in progress: `session` continuing `prompt` until a stop token or the token budget.

    Steps alternate `draft()` (the tokens the target must be fed now) and `accept(logits, hidden)` (the
    forward's rows for them) until `done`; then `result()`. The session's KV cache is the forward's to
    extend between the two.
    """

    def __init__(
        self,
        runtime: Runtime,
        session: Session,
        prompt: list[int],
        max_new_tokens: int,
        stop_tokens: frozenset[int] | None = None,
        profile: StepProfile | None = None,
    ) -> None:
        if not prompt:
            raise ValueError("prompt must hold at least one token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        max_pos = runtime.context_limit
        if len(prompt) >= max_pos:
            raise ContextLimitError(
                f"prompt of {len(prompt)} tokens leaves no room in the model's context of {max_pos}"
            )
        self.runtime, self.session, self.profile = runtime, session, profile
        self.stop = runtime.stop_tokens if stop_tokens is None else stop_tokens
        self.budget = min(max_new_tokens, max_pos - len(prompt))
        self.stats = stats = GenerationStats()
        device = runtime.device
        self.clock = PhaseClock(device, stats.time_s)
        # Fine laps only when profiling (engine/profile.py): on CUDA each lap synchronises.
        self.phases = PhaseClock(device, profile.seconds) if profile is not None else NoClock()

        # Prefix reuse: keep the KV of the longest common prefix; the rest of the prompt is prefilled
        # in the first forward together with the first draft (one forward fewer per turn).
        reused = session.prepare(prompt)
        stats.prompt_tokens, stats.reused_tokens, stats.prefilled_tokens = len(prompt), reused, len(prompt) - reused
        self.pending = prompt[reused:]  # tokens the target has not seen yet; later always [history[-1]]
        self.phases.lap("other")
        session.drafter.begin(session.history)
        self.clock.lap("draft")
        self.phases.lap("draft")
        self.generated: list[int] = []
        self.max_kv = len(session.history)
        self.finish = "length" if self.budget == max_new_tokens else "context"
        self.done = False
        self._draft: Draft = Draft()
        self._k = 0  # this step's draft budget (draft_context)

    @property
    def keep(self) -> int:
        """Logit rows the pending forward must return: one per draft token, plus the next token's."""
        return len(self._draft.tokens) + 1

    @property
    def taps(self) -> tuple[int, ...]:
        """Target hidden states the pending forward must return for every fed token (drafters that read them)."""
        return self.session.drafter.needs.taps

    def draft(self) -> list[int]:
        """Propose this step's draft; returns every token to feed the target (pending ones, then the draft)."""
        ctx = self.draft_context()
        return self.take_draft(self.session.drafter.propose(ctx) if ctx is not None else Draft())

    def draft_context(self) -> DraftContext | None:
        """What this step's drafter proposes from (None: no draft this step); `take_draft` takes the proposal.

        `draft()` is the two in one; a batch (engine/batch.py) asks every decoding's context first, so that
        drafters of one class can propose for all sessions together (DrafterBase.propose_many).
        """
        session = self.session
        self.clock.lap("other")
        self.phases.lap("other")
        # Never draft past the token budget: the step emits up to n + 1 tokens.
        self._k = k = min(session.policy.next_length(), self.budget - len(self.generated) - 1)
        if k <= 0:
            return None
        rt = self.runtime
        return DraftContext(session.history, k, rt.params, session.generator, session.policy.stop_below())

    def take_draft(self, draft: Draft) -> list[int]:
        """Adopt the drafter's proposal for `draft_context()`; returns every token to feed the target."""
        k = self._k
        if k > 0:
            if len(draft.tokens) > k:  # a drafter may not overrun its budget
                draft = Draft(draft.tokens[:k], None if draft.probs is None else draft.probs[:k], draft.sources[:k])
            self.stats.draft_limit_steps += draft.limited and not draft.tokens
        else:
            draft = Draft()
        self._draft = draft
        # In a batch the draft phase is the whole step's drafting, every class's group: each session waited for it.
        self.clock.lap("draft")
        self.phases.lap("draft")
        return [*self.pending, *draft.tokens]

    def accept(self, logits: torch.Tensor, hidden: torch.Tensor | None) -> None:
        """Take the forward's logits of the last `keep` fed tokens [keep, V] (and their trunk rows if asked)."""
        session, rt, stats, draft = self.session, self.runtime, self.stats, self._draft
        n, pending, history = len(draft.tokens), self.pending, session.history
        start = len(history) - len(pending)  # positions the target KV held before this forward
        phase = "prefill" if len(pending) > 1 else "verify"
        if self.profile is not None:
            took = self.phases.lap("forward" if phase == "verify" else "prefill")
            if phase == "verify":
                self.profile.add_step(len(pending) + n, took)
        self.max_kv = max(self.max_kv, len(history) + n)
        verdict = rt.acceptance.verify(logits, draft.tokens, draft.probs, rt.params, session.generator)
        a = verdict.accepted
        emitted, hit_stop = _cut_at_stop([*draft.tokens[:a], verdict.next_token], self.stop)
        self.clock.lap(phase)
        self.phases.lap("accept")

        kept = min(a, len(emitted))  # accepted draft tokens that survive the stop-token cut
        stats.target_forwards += 1
        stats.emitting_forwards += len(emitted) > a
        stats.accepted += kept
        if n:
            stats.drafts += 1
            stats.drafted += n
            _extend(stats.drafted_per_position, n)
            _extend(stats.accepted_per_position, kept)
            stats.credit_step(draft.sources, kept)
        self.phases.lap("stats")

        history.extend(emitted)
        self.generated.extend(emitted)
        crop_cache(session.cache, len(history) - 1)  # roll back rejected positions
        self.phases.lap("crop")
        # The KV gained positions [start, len(history) - 1): the fed prompt suffix and the kept tokens.
        rows = hidden[: len(pending) + len(emitted) - 1] if hidden is not None else None
        session.drafter.commit(Verified(history, len(emitted), rows, start, self.taps))
        self.phases.lap("commit")
        self.pending = [history[-1]]
        session.policy.update(n, a)
        self._draft = Draft()
        self.clock.lap("other")
        self.phases.lap("other")
        if hit_stop:
            self.finish = "eos"
        self.done = hit_stop or len(self.generated) >= self.budget

    def result(self) -> GenerationResult:
        """End the generation (the drafter learns it; the session's totals grow) and return what it made."""
        session, rt, stats = self.session, self.runtime, self.stats
        session.drafter.end(session.history, self.generated)
        stats.new_tokens = len(self.generated)
        stats.peak_memory_bytes = _peak_memory(rt, session.cache, self.max_kv)
        self.clock.lap("other")
        self.phases.lap("other")
        session.totals = session.totals + stats
        return GenerationResult(
            tokens=self.generated,
            finish_reason=self.finish,
            stats=stats,
            drafter=rt.drafter,
            acceptance=rt.acceptance_name,
            lossy=rt.acceptance.lossy,
        )


@torch.inference_mode()
def decode(
    runtime: Runtime,
    session: Session,
    prompt: list[int],
    max_new_tokens: int,
    stop_tokens: frozenset[int] | None = None,
    profile: StepProfile | None = None,
) -> GenerationResult:
    """Continue `session` with `prompt` (its full token history for this turn) and decode, alone."""
    if runtime.device.type == "cuda":  # the generation's peak (a batch's decodings share the batch's)
        torch.cuda.reset_peak_memory_stats(runtime.device)
    decoding = Decoding(runtime, session, prompt, max_new_tokens, stop_tokens, profile)
    forward, cache = runtime.forward, session.cache
    while not decoding.done:
        feed = decoding.draft()
        # hidden: the tapped states of every fed token [len(feed), k h], only for drafters that read them (mtp, eagle3)
        logits, hidden = forward(cache, feed, keep=decoding.keep, hidden=decoding.taps)  # [n+1, V]
        decoding.accept(logits, hidden)
    return decoding.result()


def _extend(counts: list[int], upto: int) -> None:
    """counts[i] += 1 for i < upto, growing the list as needed."""
    if len(counts) < upto:
        counts.extend([0] * (upto - len(counts)))
    for i in range(upto):
        counts[i] += 1


def _peak_memory(runtime: Runtime, cache: Any, max_kv: int) -> int:
    """CUDA: measured peak. CPU: weights + packed copies + KV at its longest (an estimate, labelled as such in docs)."""
    if runtime.device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(runtime.device))
    held = cache.get_seq_length()
    per_token = kv_bytes(cache) / held if held else 0.0
    return int(runtime.resident_bytes + per_token * max_kv)
