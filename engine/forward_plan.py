"""Which linear kernel serves which forward size, measured on the loaded model's shapes and cached per machine.

A decode step feeds one row; a verification feeds gamma + 1; the kernel fastest for one is not always
the fastest for the other (F.linear's MKL GEMM steps up at 4 and 7 rows, oneDNN's packed linear is
flatter in rows but dearer for one). A plan is per group of linears (the decoder layers, the LM head):
the kernel for one row, and the kernel from `from_rows` rows on.

`measure_forwards` times the engine's whole forward on the model's own weights for 1..MAX_ROWS rows
under every combination of the two kernels for the two groups (interleaved, medians), and `fit_plan`
turns that into a plan; a combination replaces the static choice only when it takes at most MARGIN of
its time, so noise does not flip a plan. Only kernels this machine runs are measured (engine/kernels.py).
Plans are cached by machine (the CPU's model and the instruction-set flags that matter, engine/host.py),
torch version, threads, dtype and shapes ($SPECTUNE_CACHE, else ~/.cache/spectune, file forward-plans.json;
or the file $SPECTUNE_FORWARD_PLANS names): one machine always runs one plan, and a file copied from another
host is not trusted. A measurement is capped at BUDGET_S; past it the static rule is the plan, with its note.
SPECTUNE_FORWARD_PLANS=off makes `auto` measure nothing and keep the static rule, and a forced `mixed` plan
is measured without being stored (the test suite runs so, for outputs that do not depend on a measurement
and a cache it does not touch).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from common.cache import cache_root
from common.files import write_atomic
from engine.host import probe
from engine.kernels import MAX_ROWS, GroupPlan, LinearPlan, kernel_refusal
from engine.kv import crop_cache, position_limit
from engine.llama import LlamaForward

log = logging.getLogger("spectune.forward")
MARGIN = 0.9  # the other kernel must take at most this share of the static choice's time
REPEATS = 9
CONTEXT = 256  # positions before the measured forwards: a short agent context
CACHE_FILE = "forward-plans.json"
PLANS_ENV = "SPECTUNE_FORWARD_PLANS"  # a plan file, or "off": auto measures nothing
# At most this many seconds measuring a plan (projected from one timed forward first, then checked as it
# runs): past it auto keeps the static rule and caches that choice. Without a cap a large model, or a host
# other jobs load, measured for minutes before the first token (seen: over 5 minutes).
BUDGET_S = 20.0


class OverBudget(Exception):
    """A plan measurement that would take, or took, longer than its cap (the message says how long)."""


def fit_plan(times: dict[str, dict[int, float]], static: str) -> LinearPlan:
    """The plan from whole-forward median seconds by kernel combination ("layers/head") and fed rows.

    Single rows: the fastest combination if it takes at most MARGIN of the static one's time, else the
    static one. Then, the LM head first and the layers given the head's choice, another kernel takes
    over from the smallest size from which it is never slower and on average takes at most MARGIN of
    the time (a lone noisy size neither switches a group nor blocks a switch the sizes around it show);
    of several such kernels, the earliest, then the fastest on average.
    """
    fixed = f"{static}/{static}"
    rows = sorted(times[fixed])
    kernels = sorted({part for combo in times for part in combo.split("/")})
    fastest = min(times, key=lambda combo: times[combo][rows[0]])
    single = fastest if times[fastest][rows[0]] <= MARGIN * times[fixed][rows[0]] else fixed
    layers_1, head_1 = single.split("/")

    def takes_over(ratio: Callable[[int], float]) -> tuple[int, float] | None:
        for start in (r for r in rows if r >= 2):
            later = [ratio(r) for r in rows if r >= start]
            if max(later) <= 1.0 and statistics.fmean(later) <= MARGIN:
                return start, statistics.fmean(later)
        return None

    def group(base: str, combo: Callable[[str, int], str]) -> GroupPlan:
        found = []
        for kernel in kernels:
            if kernel != base and all(combo(kernel, r) in times for r in rows):
                hit = takes_over(lambda r, k=kernel: times[combo(k, r)][r] / times[combo(base, r)][r])
                if hit is not None:
                    found.append((hit, kernel))
        if not found:
            return GroupPlan(base, base, MAX_ROWS + 1)
        (start, _), kernel = min(found)
        return GroupPlan(base, kernel, start)

    head = group(head_1, lambda kernel, r: f"{layers_1}/{kernel}")
    layers = group(layers_1, lambda kernel, r: f"{kernel}/{head.kernel(r)}")
    return LinearPlan(layers, head)


def machine_key(model: torch.nn.Module) -> str:
    """What a plan depends on: the host (CPU, its flags), torch, threads, dtype and the measured linears' shapes."""
    layer = _layer_modules(model)
    shapes = [tuple(m.weight.shape) for m in layer] + [tuple(model.lm_head.weight.shape)]
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return f"{probe().key()}|torch {torch.__version__}|threads {torch.get_num_threads()}|{dtype}|{shapes}"


def plan_for(model: torch.nn.Module, static: str, measure: Callable[..., dict] | None = None) -> LinearPlan:
    """The cached plan for this model's shapes on this machine, measured (and cached) the first time.

    A cached plan naming a kernel this machine cannot run (a file copied from another host whose key
    matched) is measured again. A measurement over BUDGET_S gives the static rule, with the reason in `note`.
    """
    key = f"{machine_key(model)}|static {static}"
    path = cache_file()
    persist = measuring_enabled()  # with plans off (tests), a forced plan is measured but never stored or read
    cached = _read_cache(path) if persist else {}
    if key in cached:
        try:
            plan = LinearPlan.from_dict(cached[key])
        except ValueError:
            plan = None  # a stale or broken entry: measured again below
        if plan is not None and plan.kernels() <= set(available_kernels(model)):
            return plan
    try:
        plan = fit_plan((measure or measure_forwards)(model), static)
    except OverBudget as exc:
        plan = LinearPlan.uniform(static, note=f"not measured: {exc}")
        where = f"; delete {path} to measure again" if persist else ""
        log.warning("note: forward plan %s, so the static rule stays%s", plan.note, where)
    if persist:
        cached = _read_cache(path)  # another process may have written meanwhile
        cached[key] = plan.to_dict()
        _write_cache(path, cached)
    return plan


def measure_forwards(
    model: torch.nn.Module, repeats: int = REPEATS, budget_s: float | None = None
) -> dict[str, dict[int, float]]:
    """Median seconds of the engine's whole forward over 1..MAX_ROWS new tokens, by kernel combination.

    Whole forwards, not linears alone: a linear timed in a loop reads weights its previous call left in
    the cache, which a forward streaming every layer and the LM head never does (measured here: the 8 MB
    head of the bundled target on oneDNN beat F.linear 331 vs 591 us for 5 rows alone, but the whole
    5-row forward only 2.14 vs 2.18 ms). One forward holds both kernels of both groups; its switches
    select each combination, every size and combination interleaved after a context of CONTEXT tokens,
    each timed call after an untimed one on the same combination.

    Bounded: one forward on F.linear is timed first (before any kernel packs a copy of the weights) and
    the whole measurement projected from it; OverBudget when that projection, or the clock as it runs,
    passes `budget_s` (default BUDGET_S).
    """
    budget = BUDGET_S if budget_s is None else budget_s
    started = time.perf_counter()
    kernels = available_kernels(model)
    combos = [f"{layers}/{head}" for layers in kernels for head in kernels]
    # two different copying kernels in one combination are not measured (each forward holds one of them)
    measured = [c for c in combos if len(set(c.split("/")) - {kernels[0]}) <= 1]
    vocab = int(model.config.vocab_size)
    context = min(CONTEXT, (position_limit(model) or CONTEXT + MAX_ROWS) - MAX_ROWS)
    tokens = [(t * 7919 + 13) % vocab for t in range(context + MAX_ROWS)]
    with torch.inference_mode():
        one = _seconds_per_forward(LlamaForward(model), tokens[:MAX_ROWS])
    calls = 2 * repeats * MAX_ROWS * len(measured) + (len(kernels) - 1) * context / MAX_ROWS
    projected = time.perf_counter() - started + one * calls
    if projected > budget:
        raise OverBudget(f"measuring would take ~{projected:.0f} s here (cap {budget:.0f} s)")
    forwards = {}  # one forward per kernel for "many", holding the single-row kernel too: every combination
    for many in kernels[1:]:
        both = GroupPlan(kernels[0], many, 1)
        forwards[many] = LlamaForward(model, plan=LinearPlan(both, both))
    samples: dict[str, dict[int, list[float]]] = {c: {r: [] for r in range(1, MAX_ROWS + 1)} for c in measured}
    never = MAX_ROWS + 1
    with torch.inference_mode():
        caches = {}
        for many, forward in forwards.items():
            caches[many] = forward.new_cache()
            forward(caches[many], tokens[:context])
        for _ in range(repeats):
            for rows in range(1, MAX_ROWS + 1):
                fed = tokens[context : context + rows]
                for combo in measured:
                    layers, head = combo.split("/")
                    # the forward whose `many` kernel the combination needs (any, if it needs none)
                    many = next((k for k in (layers, head) if k != kernels[0]), kernels[1])
                    forward, cache = forwards[many], caches[many]
                    forward.switches["layers"].from_rows = 1 if layers != kernels[0] else never
                    forward.switches["head"].from_rows = 1 if head != kernels[0] else never
                    forward(cache, fed, keep=rows)  # untimed: caches warm for this combination
                    crop_cache(cache, context)
                    t0 = time.perf_counter()
                    forward(cache, fed, keep=rows)
                    samples[combo][rows].append(time.perf_counter() - t0)
                    crop_cache(cache, context)
                if time.perf_counter() - started > budget:
                    raise OverBudget(f"measuring passed its cap of {budget:.0f} s here (a loaded host?)")
    return {c: {r: statistics.median(v) for r, v in by_rows.items()} for c, by_rows in samples.items()}


def _seconds_per_forward(forward: LlamaForward, tokens: list[int]) -> float:
    """Seconds of one forward over `tokens` on a fresh cache (the second of two: the first pays warm-up)."""
    elapsed = 0.0
    for _ in range(2):
        cache = forward.new_cache()
        t0 = time.perf_counter()
        forward(cache, tokens, keep=len(tokens))
        elapsed = time.perf_counter() - t0
    return elapsed


def available_kernels(model: torch.nn.Module) -> tuple[str, ...]:
    """The kernels a plan may use for `model` on this machine, F.linear first (engine.kernels.kernel_refusal)."""
    weight = next(model.parameters())
    where, dtype = weight.device.type, weight.dtype
    return tuple(k for k in ("torch", "transposed", "onednn") if kernel_refusal(k, where, dtype) is None)


def _layer_modules(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """The linears of the first decoder layer: q, k, v, o, gate, up, down."""
    layer = model.model.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    return [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]


def measuring_enabled() -> bool:
    """False when $SPECTUNE_FORWARD_PLANS is "off": auto keeps the static rule (the test suite's setting)."""
    return os.environ.get(PLANS_ENV, "").strip().lower() != "off"


def cache_file() -> Path:
    """$SPECTUNE_FORWARD_PLANS if it names a file, else $SPECTUNE_CACHE (else ~/.cache/spectune)/forward-plans.json."""
    explicit = os.environ.get(PLANS_ENV, "").strip()
    if explicit and explicit.lower() != "off":
        return Path(explicit).expanduser()
    return cache_root() / CACHE_FILE


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: measured again, then rewritten whole
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    try:
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True))
    except OSError:
        pass  # a read-only cache only costs a measurement next time
