"""Generation statistics: raw counts that add up across turns, tasks and trials.

Derived values (acceptance rate, mean accepted length) are always computed from the counts, never
stored, so sums stay consistent. Names are read by later tools; do not rename them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TIME_KEYS = ("prefill", "draft", "verify", "other")


def _add_lists(a: list[int], b: list[int]) -> list[int]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n)]


def _new_share() -> dict[str, Any]:
    return {"drafts": 0, "drafted": 0, "accepted": 0, "drafted_per_position": [], "accepted_per_position": []}


def _copy_share(share: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, list) else v for k, v in share.items()}


def _bump(counts: list[int], i: int) -> None:
    if len(counts) <= i:
        counts.extend([0] * (i + 1 - len(counts)))
    counts[i] += 1


@dataclass
class GenerationStats:
    """Counters of one generation (or a sum of many)."""

    new_tokens: int = 0  # tokens emitted to the caller
    target_forwards: int = 0  # every target forward, prefill included
    emitting_forwards: int = 0  # target forwards whose own token (correction/bonus) was emitted
    drafts: int = 0  # verification steps that carried >= 1 draft token
    drafted: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens accepted and kept in the output (after EOS / max-token cuts)
    drafted_per_position: list[int] = field(default_factory=list)  # index i: drafts with a token at i
    accepted_per_position: list[int] = field(default_factory=list)  # index i: kept accepted at i
    # name -> drafts (steps it led) / drafted / accepted, and its drafted_per_position / accepted_per_position
    per_drafter: dict[str, dict[str, Any]] = field(default_factory=dict)
    prompt_tokens: int = 0  # prompt tokens given to the session
    reused_tokens: int = 0  # prompt tokens whose KV came from the session's cache
    prefilled_tokens: int = 0  # prompt tokens the target computed
    # steps that wanted a draft but got none because the draft model's position limit was reached
    draft_limit_steps: int = 0
    peak_memory_bytes: int = 0  # CUDA: max allocated; CPU: weights + KV estimate
    time_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TIME_KEYS, 0.0))

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted (0.0 when nothing was drafted)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """1 + accepted / drafts: tokens per verification, bonus included (vLLM / llama.cpp style)."""
        return 1.0 + self.accepted / self.drafts if self.drafts else 1.0

    def credit_step(self, sources: list[str], kept: int) -> None:
        """Credit one step's draft to its proposers: sources[i] drafted position i, the first `kept` stayed.

        The step counts once, for the drafter of its first token (so sum of per-drafter `drafts` ==
        `drafts` even when two drafters filled one step); drafted / accepted count per token, and
        per-position counts index the token's position in the step's draft.
        """
        for i, name in enumerate(sources):
            share = self.per_drafter.setdefault(name, _new_share())
            share["drafts"] += i == 0
            share["drafted"] += 1
            share["accepted"] += i < kept
            _bump(share["drafted_per_position"], i)
            if i < kept:
                _bump(share["accepted_per_position"], i)

    def __add__(self, other: GenerationStats) -> GenerationStats:
        per = {k: _copy_share(v) for k, v in self.per_drafter.items()}
        for name, share in other.per_drafter.items():
            mine = per.setdefault(name, _new_share())
            for k, v in share.items():
                mine[k] = _add_lists(mine.get(k, []), v) if isinstance(v, list) else mine.get(k, 0) + v
        return GenerationStats(
            new_tokens=self.new_tokens + other.new_tokens,
            target_forwards=self.target_forwards + other.target_forwards,
            emitting_forwards=self.emitting_forwards + other.emitting_forwards,
            drafts=self.drafts + other.drafts,
            drafted=self.drafted + other.drafted,
            accepted=self.accepted + other.accepted,
            drafted_per_position=_add_lists(self.drafted_per_position, other.drafted_per_position),
            accepted_per_position=_add_lists(self.accepted_per_position, other.accepted_per_position),
            per_drafter=per,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            reused_tokens=self.reused_tokens + other.reused_tokens,
            prefilled_tokens=self.prefilled_tokens + other.prefilled_tokens,
            draft_limit_steps=self.draft_limit_steps + other.draft_limit_steps,
            peak_memory_bytes=max(self.peak_memory_bytes, other.peak_memory_bytes),
            time_s={k: self.time_s.get(k, 0.0) + other.time_s.get(k, 0.0) for k in TIME_KEYS},
        )

    def to_dict(self) -> dict[str, Any]:
        """Raw counts plus the derived values, JSON-ready."""
        return {
            "new_tokens": self.new_tokens,
            "target_forwards": self.target_forwards,
            "emitting_forwards": self.emitting_forwards,
            "drafts": self.drafts,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "drafted_per_position": list(self.drafted_per_position),
            "accepted_per_position": list(self.accepted_per_position),
            "per_drafter": {k: _copy_share(v) for k, v in self.per_drafter.items()},
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "prefilled_tokens": self.prefilled_tokens,
            "draft_limit_steps": self.draft_limit_steps,
            "peak_memory_bytes": self.peak_memory_bytes,
            "time_s": dict(self.time_s),
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GenerationStats:
        """Rebuild from `to_dict` output (derived keys are ignored)."""
        return cls(
            **{k: data[k] for k in cls.__dataclass_fields__ if k in data},
        )
