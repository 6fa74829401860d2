"""Cost profile of the engine's forward: t_1 and R_k = t_k / t_1, the draft cost C, and the analytic bound.

Speculation pays when verifying k = gamma + 1 tokens costs about one step (R_k close to 1) and drafting
is cheap (C small). Measured through the model's own forward (its numeric path) and KV cache, as a decode step runs:
a prompt is prefilled once, then each timed forward appends k tokens and the cache is cropped back
(the engine's rollback), k = 1..8 interleaved so drift hits every k alike, each timed sweep after an untimed
one on the same path (right after another path's calls the caches hold that path's data); medians over repeats.

The bound (Leviathan et al.; the seeds' speedup formula): a step emits E tokens on average (accepted
draft tokens + the target's own) and costs R_k + C plain steps, so generation ON ÷ OFF <= E / (R_k + C).
With C measured, R_k measured and E measured on the same prompts, measured ÷ bound says how close the
decode loop comes to what its costs allow.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from engine.forward import Forward
from engine.kv import crop_cache
from engine.loading import LoadedModel

KS = tuple(range(1, 9))


def forward_costs(
    model: LoadedModel, prompt: list[int], repeats: int = 7, ks: tuple[int, ...] = KS, forward: Forward | None = None
) -> dict[str, Any]:
    """Median seconds of one forward over k new tokens after `prompt`, and R_k = t_k / t_1 (per repeat too).

    `forward`: another numeric path over the same weights (default: the model's own).
    """
    return paths_costs(model, prompt, {"only": forward or model.forward}, repeats, ks)["only"]


def paths_costs(
    model: LoadedModel, prompt: list[int], forwards: dict[str, Forward], repeats: int = 7, ks: tuple[int, ...] = KS
) -> dict[str, dict[str, Any]]:
    """forward_costs for several forwards (numeric paths) of one model, interleaved per repeat so drift hits all."""
    vocab = int(model.model.config.vocab_size)
    base = len(prompt)
    tokens = [(t * 7919 + 13) % vocab for t in range(max(ks))]  # fixed, arbitrary ids: cost does not depend on them
    caches = {}
    times: dict[str, dict[int, list[float]]] = {name: {k: [] for k in ks} for name in forwards}
    with torch.inference_mode():
        for name, forward in forwards.items():
            caches[name] = cache = forward.new_cache()
            forward(cache, list(prompt), keep=1)
            for k in ks:  # untimed: first-call allocations, the cache's growth
                forward(cache, tokens[:k], keep=k)
                crop_cache(cache, base)
        for _ in range(repeats):
            for name, forward in forwards.items():
                cache = caches[name]
                # Untimed, the same sweep first: right after another path's calls (other weights, packed copies)
                # the caches hold that path's data; timed, that inflated t_1 (~25% here) and made every R_k
                # look smaller than inside a generation, where one path runs alone.
                for k in ks:
                    forward(cache, tokens[:k], keep=k)
                    crop_cache(cache, base)
                for k in ks:
                    t0 = time.perf_counter()
                    forward(cache, tokens[:k], keep=k)  # verification keeps the logits of every fed row
                    synchronize(model.device)
                    times[name][k].append(time.perf_counter() - t0)
                    crop_cache(cache, base)
    out = {}
    for name, forward in forwards.items():
        t = {k: statistics.median(v) for k, v in times[name].items()}
        out[name] = {
            "path": forward.choice.describe(),
            "context": base,
            "t_s": t,
            "R": {k: t[k] / t[1] for k in ks},
            "R_per_repeat": {k: [a / b for a, b in zip(times[name][k], times[name][1], strict=True)] for k in ks},
            "t1_per_repeat": times[name][1],
            "repeats": repeats,
        }
    return out


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously), so a clock read after it is true."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bound(tokens_per_step: float, r: float, c: float) -> float:
    """The analytic speedup limit E / (R + C): E tokens per step at R + C plain steps of cost."""
    return tokens_per_step / (r + c)


def limit_rows(
    acceptance: dict[str, Any],
    on_vs_off: dict[str, float | None],
    target_costs: dict[str, Any],
    draft_costs: dict[str, Any] | None,
    gamma: int,
    cases: dict[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Per spectune drafter: E, the verify cost R, the draft cost C, the bound and measured ON/OFF ÷ bound.

    From the warm-up pass's counts (prefill included on both sides): E = target forwards of plain decoding
    ÷ those of the drafter for the same tokens (tokens per step relative to plain). A step verifies
    k = round(mean draft length) + 1 rows when it drafted and one otherwise, so the verify cost of an
    average step is R = d·R_k + (1 - d) with d the share of decode steps that drafted. C = drafting time
    per decode step ÷ t_1: for draft_model, mean draft length one-token draft forwards (the draft's own
    t_1) on the drafting steps; for every other drafter (lookup, mtp, layer_skip, combined) the engine's
    drafting time in the timed passes. `cases`: spectune case -> row name (default: ngram, suffix, draft_model).

    The same bound from the engine's own phase timers in the timed passes (`*_in_generation`): R = verify time
    per decode step ÷ plain decoding's, C = drafting time per step ÷ plain's step. Forwards inside a
    generation can cost more than the isolated profile says (a growing context, caches and allocator
    shared with the drafting and the loop), so measured ÷ this bound isolates what the loop itself loses.
    """
    base = acceptance.get("spectune_plain") or {}
    plain = base.get("tokens_per_target_forward") or 1.0
    t1 = target_costs["t_s"][1]
    t1_gen = _verify_per_step(base)
    rows: dict[str, dict[str, Any]] = {}
    cases = cases or {"spectune_ngram": "ngram", "spectune_suffix": "suffix", "spectune_draft_model": "draft_model"}
    for case, drafter in cases.items():
        a = acceptance.get(case)
        if a is None:
            continue
        e = (a.get("tokens_per_target_forward") or 0.0) / plain
        prefills = len(a.get("per_prompt") or []) or 1
        steps = max((a.get("target_forwards") or 0) - prefills, 1)
        d = min((a.get("drafts") or 0) / steps, 1.0)
        length = a.get("mean_draft_length") or gamma
        k = min(max(round(length) + 1, 1), max(target_costs["R"]))
        r = d * target_costs["R"][k] + (1.0 - d)
        stats = (a.get("engine_stats") or {}).get("timed") or {}
        timed_steps = max((stats.get("target_forwards") or 0) - (stats.get("generations") or 0), 1)
        if drafter == "draft_model" and draft_costs is not None:
            c = d * length * draft_costs["t_s"][1] / t1
        else:
            c = (stats.get("draft_s") or 0.0) / timed_steps / t1
        b = bound(e, r, c) if e else None
        measured = on_vs_off.get(drafter)
        step = _verify_per_step(a)
        r_gen = step / t1_gen if step and t1_gen else None
        c_gen = (stats.get("draft_s") or 0.0) / timed_steps / t1_gen if t1_gen else None
        b_gen = bound(e, r_gen, c_gen) if e and r_gen is not None else None
        rows[drafter] = {
            "E": e,
            "k": k,
            "drafting_share": d,
            "R": r,
            "C": c,
            "bound": b,
            "measured_on_vs_off": measured,
            "measured_over_bound": measured / b if measured and b else None,
            "R_in_generation": r_gen,
            "C_in_generation": c_gen,
            "bound_in_generation": b_gen,
            "measured_over_bound_in_generation": measured / b_gen if measured and b_gen else None,
        }
    return rows


def _verify_per_step(case: dict[str, Any]) -> float | None:
    """Seconds of target verification per decode step (prefill forwards apart) in a case's timed passes."""
    stats = (case.get("engine_stats") or {}).get("timed") or {}
    steps = (stats.get("target_forwards") or 0) - (stats.get("generations") or 0)
    return stats["verify_s"] / steps if steps > 0 and stats.get("verify_s") else None


def step_profile_rows(profiles: dict[str, Any], target_costs: dict[str, Any], plain: str = "spectune_plain") -> dict:
    """Per spectune case: microseconds per step by phase, and the target forward's cost by fed rows inside the
    generations (R_k gen = a k-row forward ÷ plain decoding's 1-row forward) beside the isolated profile's R_k."""
    base = profiles.get(plain)
    t1_gen = base.forward_us().get(1) if base is not None else None
    rows = {}
    for case, profile in profiles.items():
        forward = profile.forward_us()
        rows[case] = {
            **profile.to_dict(),
            "forward_us_by_rows": forward,
            "R_in_generation_by_rows": {k: v / t1_gen for k, v in forward.items()} if t1_gen else {},
            "R_profile_by_rows": {k: target_costs["R"][k] for k in forward if k in target_costs["R"]},
        }
    return rows
