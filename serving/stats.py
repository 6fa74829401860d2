"""llama-server's per-request figures as spectune's `GenerationStats`: summaries, MLflow and the tuner read one schema.

Sources, all from the server itself (llama.cpp b11434, tools/server/):
- the `/completion` reply: `tokens` (what was emitted), `timings.prompt_n` (prompt tokens it computed),
  `timings.cache_n` (prompt tokens whose KV it reused: `cache_prompt`), `prompt_ms`, `predicted_ms`,
  `draft_n` / `draft_n_accepted` (absent when nothing was drafted);
- the `/metrics` counters before and after the request (`--metrics`; one slot, one request at a time, so
  the difference is this request's; with several agents at once they are not, and the slot's log lines
  below stand alone): `spec_decode_num_drafts_total` (verification steps that carried a
  draft: spectune's `drafts`) and `spec_decode_num_accepted_tokens_per_pos_total{position=i}`;
- the server log with `LLAMA_TRACE=1`: one `accepted A/N draft tokens` line per verification step, which
  gives the draft length of every step and so `drafted_per_position` (no counter has it).

Differences from the built-in engine, kept visible rather than papered over: llama-server counts a step's
whole accepted run even when a stop token inside it ends the reply (spectune counts what was kept), and it
reports generation time as one figure, drafting included, which lands in `time_s["verify"]`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.stats import GenerationStats

DRAFTS = "llamacpp:spec_decode_num_drafts_total"
DRAFTED = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
PER_POSITION = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
_POSITION = re.compile(r'^llamacpp:spec_decode_num_accepted_tokens_per_pos_total\{position="(\d+)"\}$')
# SLT_INF(slot, "accepted %2zu/%2zu draft tokens\n", ...) in server-context.cpp, printed when LLAMA_TRACE > 0
STEP_LINE = re.compile(r"accepted\s+(\d+)/\s*(\d+) draft tokens")
# the same line with the slot it came from: "slot   operator(): id  0 | task 155 | accepted  2/ 4 draft tokens"
SLOT_STEP_LINE = re.compile(r"\bid\s+(\d+) \| task \d+ \| accepted\s+(\d+)/\s*(\d+) draft tokens")


@dataclass(frozen=True)
class Step:
    """One verification step as the server logged it: `accepted` of `drafted` draft tokens kept."""

    accepted: int
    drafted: int


def parse_steps(log_text: str, slot: int | None = None) -> list[Step]:
    """Every `accepted A/N draft tokens` line of a server log, in order (only slot `slot`'s when given)."""
    if slot is None:
        return [Step(int(a), int(n)) for a, n in STEP_LINE.findall(log_text)]
    return [Step(int(a), int(n)) for s, a, n in SLOT_STEP_LINE.findall(log_text) if int(s) == slot]


def accepted_per_position(metrics: Mapping[str, float]) -> list[int]:
    """The per-position accepted counter as a list (index = draft position)."""
    found = {int(m.group(1)): int(v) for name, v in metrics.items() if (m := _POSITION.match(name))}
    return [found.get(i, 0) for i in range(max(found) + 1)] if found else []


def _minus(after: list[int], before: list[int]) -> list[int]:
    before = before + [0] * (len(after) - len(before))
    return [a - b for a, b in zip(after, before, strict=False)]


def _trim(counts: list[int]) -> list[int]:
    """Drop trailing zeros, as the engine's lists end at their last non-zero count."""
    end = len(counts)
    while end and counts[end - 1] == 0:
        end -= 1
    return counts[:end]


def request_stats(
    prompt: Sequence[int],
    reply: Mapping[str, Any],
    before: Mapping[str, float],
    after: Mapping[str, float],
    steps: Sequence[Step],
    wall_s: float,
    *,
    drafter: str,
    peak_memory_bytes: int = 0,
    shared: bool = False,
) -> GenerationStats:
    """The statistics of one `/completion` request (see the module docstring for where each figure comes from).

    `shared`: other slots were busy at the same time (several agents at once), so the /metrics counters moved
    for their requests too; the request's steps are then its own slot's log lines (`before`/`after` unused)
    and only they and the reply are checked against each other.

    Raises ValueError when the sources disagree (a step line missing from the log, counters that moved
    by something other than this request), so a measurement is never built on a silent mismatch.
    """
    timings = reply.get("timings") or {}
    new_tokens = len(reply.get("tokens") or [])
    drafted = int(timings.get("draft_n", 0))
    accepted = int(timings.get("draft_n_accepted", 0))
    drafts = len(steps) if shared else int(after.get(DRAFTS, 0) - before.get(DRAFTS, 0))
    if len(steps) != drafts or sum(s.drafted for s in steps) != drafted or sum(s.accepted for s in steps) != accepted:
        raise ValueError(
            f"llama-server's figures disagree: {len(steps)} logged steps drafting {sum(s.drafted for s in steps)} "
            f"and accepting {sum(s.accepted for s in steps)}, but /metrics counts {drafts} steps and the reply "
            f"{drafted} drafted, {accepted} accepted"
        )
    drafted_pos: list[int] = []
    accepted_pos: list[int] = []
    for step in steps:
        for i in range(step.drafted):
            if len(drafted_pos) <= i:
                drafted_pos.append(0)
                accepted_pos.append(0)
            drafted_pos[i] += 1
            accepted_pos[i] += i < step.accepted
    server_pos = [] if shared else _trim(_minus(accepted_per_position(after), accepted_per_position(before)))
    if server_pos and server_pos != _trim(accepted_pos):
        raise ValueError(
            f"llama-server's per-position accepted counts {server_pos} disagree with its log {accepted_pos}"
        )
    # llama-server counts a step's whole accepted run, also when a stop token inside it ended the reply; the
    # built-in engine counts what was kept. emitting_forwards keeps new_tokens == accepted + emitting_forwards.
    emitting = max(0, new_tokens - accepted)
    prompt_n = int(timings.get("prompt_n", 0))
    cached = int(timings.get("cache_n", len(prompt) - prompt_n))
    prefill_s = float(timings.get("prompt_ms", 0.0)) / 1000.0
    generate_s = float(timings.get("predicted_ms", 0.0)) / 1000.0
    stats = GenerationStats(
        new_tokens=new_tokens,
        emitting_forwards=emitting,
        target_forwards=emitting,  # prefill shares the first step's forward, as in the built-in engine
        drafts=drafts,
        drafted=drafted,
        accepted=accepted,
        drafted_per_position=_trim(drafted_pos),
        accepted_per_position=_trim(accepted_pos),
        prompt_tokens=len(prompt),
        reused_tokens=cached,
        prefilled_tokens=len(prompt) - cached,
        peak_memory_bytes=peak_memory_bytes,
        time_s={
            "prefill": prefill_s,
            "draft": 0.0,  # not reported apart: in "verify"
            "verify": generate_s,
            "other": max(0.0, wall_s - prefill_s - generate_s),  # HTTP, JSON, scheduling
        },
    )
    if drafts:
        stats.per_drafter[drafter] = {
            "drafts": drafts,
            "drafted": drafted,
            "accepted": accepted,
            "drafted_per_position": list(stats.drafted_per_position),
            "accepted_per_position": list(stats.accepted_per_position),
        }
    return stats
