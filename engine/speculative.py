"""The decode loop: prefill, then draft -> verify -> accept -> emit -> roll back, batch size 1.

Invariant kept between steps: the target KV cache holds exactly `history[:-1]`; the last emitted
token is fed at the head of the next verification forward together with the draft (the first
forward of a turn carries the whole unprefilled prompt suffix instead, so prefill and the first
verification share one forward):

    forward([last] + draft)  -> logits row i scores the token after draft[:i]   (n + 1 rows)
    accept a prefix of a tokens, emit draft[:a] + [next], crop the KV to len(history) - 1

so one target forward yields between 1 and n + 1 tokens. With `drafter=none` (n = 0) this is plain
decoding, which is the baseline every speculative configuration is compared against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from engine.drafters import Draft, DraftContext, Verified
from engine.kv import crop_cache, kv_bytes
from engine.profile import NoClock, PhaseClock
from engine.stats import GenerationStats

if TYPE_CHECKING:
    from engine.session import Session


class ContextLimitError(ValueError):
    """The prompt alone does not fit the model's context window."""


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


@torch.inference_mode()
def generate(
    session: Session,
    prompt: list[int],
    max_new_tokens: int,
    stop_tokens: frozenset[int] | None = None,
) -> GenerationResult:
    """Continue `session` with `prompt` (its full token history for this turn) and decode."""
    engine = session.engine
    if not prompt:
        raise ValueError("prompt must hold at least one token")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    max_pos = engine.context_limit
    if len(prompt) >= max_pos:
        raise ContextLimitError(f"prompt of {len(prompt)} tokens leaves no room in the model's context of {max_pos}")
    stop = engine.stop_tokens if stop_tokens is None else stop_tokens
    budget = min(max_new_tokens, max_pos - len(prompt))
    stats = GenerationStats()
    device = engine.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    clock = PhaseClock(device, stats.time_s)
    # Fine laps only when profiling (engine/profile.py): on CUDA each lap synchronises.
    phases = PhaseClock(device, engine.step_profile.seconds) if engine.step_profile is not None else NoClock()
    profile = engine.step_profile

    # Prefix reuse: keep the KV of the longest common prefix; the rest of the prompt is prefilled
    # in the first forward together with the first draft (one forward fewer per turn).
    reused = session.prepare(prompt)
    history, cache, drafter, policy = session.history, session.cache, session.drafter, session.policy
    stats.prompt_tokens, stats.reused_tokens, stats.prefilled_tokens = len(prompt), reused, len(prompt) - reused
    pending = prompt[reused:]  # tokens the target has not seen yet; later always [history[-1]]
    phases.lap("other")
    drafter.begin(history)
    clock.lap("draft")
    phases.lap("draft")

    generated: list[int] = []
    max_kv = len(history)
    finish = "length" if budget == max_new_tokens else "context"
    while len(generated) < budget:
        # Never draft past the token budget: the step emits up to n + 1 tokens.
        k = min(policy.next_length(), budget - len(generated) - 1)
        draft = Draft()
        if k > 0:
            ctx = DraftContext(history, k, engine.params, session.generator, policy.stop_below())
            draft = drafter.propose(ctx)
            if len(draft.tokens) > k:  # a drafter may not overrun its budget
                draft = Draft(draft.tokens[:k], None if draft.probs is None else draft.probs[:k], draft.sources[:k])
            stats.draft_limit_steps += draft.limited and not draft.tokens
        clock.lap("draft")
        phases.lap("draft")
        n = len(draft.tokens)

        feed = [*pending, *draft.tokens]
        start = len(history) - len(pending)  # positions the target KV holds before this forward
        # hidden: the trunk output of every fed token [len(feed), h], only for drafters that read it (mtp)
        logits, hidden = engine.forward(cache, feed, keep=n + 1, hidden=drafter.needs.target_hidden)  # [n+1, V]
        phase = "prefill" if len(pending) > 1 else "verify"
        if profile is not None:
            took = phases.lap("forward" if phase == "verify" else "prefill")
            if phase == "verify":
                profile.add_step(len(feed), took)
        max_kv = max(max_kv, len(history) + n)
        verdict = engine.acceptance.verify(logits, draft.tokens, draft.probs, engine.params, session.generator)
        a = verdict.accepted
        emitted, hit_stop = _cut_at_stop([*draft.tokens[:a], verdict.next_token], stop)
        clock.lap(phase)
        phases.lap("accept")

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
        phases.lap("stats")

        history.extend(emitted)
        generated.extend(emitted)
        crop_cache(cache, len(history) - 1)  # roll back rejected positions
        phases.lap("crop")
        # The KV gained positions [start, len(history) - 1): the fed prompt suffix and the kept tokens.
        rows = hidden[: len(pending) + len(emitted) - 1] if hidden is not None else None
        drafter.commit(Verified(history, len(emitted), rows, start))
        phases.lap("commit")
        pending = [history[-1]]
        policy.update(n, a)
        clock.lap("other")
        phases.lap("other")
        if hit_stop:
            finish = "eos"
            break

    drafter.end(history, generated)
    stats.new_tokens = len(generated)
    stats.peak_memory_bytes = _peak_memory(engine, cache, max_kv, device)
    clock.lap("other")
    phases.lap("other")
    session.totals = session.totals + stats
    return GenerationResult(
        tokens=generated,
        finish_reason=finish,
        stats=stats,
        drafter=engine.config.drafter,
        acceptance=engine.config.acceptance,
        lossy=engine.acceptance.lossy,
    )


def _extend(counts: list[int], upto: int) -> None:
    """counts[i] += 1 for i < upto, growing the list as needed."""
    if len(counts) < upto:
        counts.extend([0] * (upto - len(counts)))
    for i in range(upto):
        counts[i] += 1


def _peak_memory(engine, cache, max_kv: int, device: torch.device) -> int:
    """CUDA: measured peak. CPU: weights + packed copies + KV at its longest (an estimate, labelled as such in docs)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    held = cache.get_seq_length()
    per_token = kv_bytes(cache) / held if held else 0.0
    return int(engine.weight_bytes + engine.packed_bytes + per_token * max_kv)
