"""Which linear kernel serves which forward size, measured on the loaded model's shapes and cached per machine.

A decode step feeds one row; a verification feeds gamma + 1; the kernel fastest for one is not always
the fastest for the other (F.linear's MKL GEMM steps up at 4 and 7 rows, oneDNN's packed linear is
flatter in rows but dearer for one). A plan is per group of linears (the decoder layers, the LM head):
the kernel for one row, and the kernel from `from_rows` rows on.

`measure_forwards` times the engine's whole forward on the model's own weights for 1..MAX_ROWS rows
under every combination of the two kernels for the two groups (interleaved, medians), and `fit_plan`
turns that into a plan; a combination replaces the static choice only when it takes at most MARGIN of
its time, so noise does not flip a plan. Plans are cached by machine, torch version, threads, dtype and shapes
($SPECTUNE_CACHE, else ~/.cache/spectune, file forward-plans.json; or the file $SPECTUNE_FORWARD_PLANS
names): one machine always runs one plan. SPECTUNE_FORWARD_PLANS=off makes `auto` measure nothing and
keep the static rule, and a forced `mixed` plan is measured without being stored (the test suite runs so,
for outputs that do not depend on a measurement and a cache it does not touch).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from common.cache import cache_root
from common.files import write_atomic

KERNEL_NAMES = ("torch", "onednn", "transposed")
MAX_ROWS = 8  # verification sizes measured: gamma + 1 up to 8
MARGIN = 0.9  # the other kernel must take at most this share of the static choice's time
REPEATS = 9
CONTEXT = 256  # positions before the measured forwards: a short agent context
CACHE_FILE = "forward-plans.json"
PLANS_ENV = "SPECTUNE_FORWARD_PLANS"  # a plan file, or "off": auto measures nothing
_SHORT = {"torch": "F.linear", "onednn": "oneDNN", "transposed": "matmul over [in, out] weights"}


@dataclass(frozen=True)
class GroupPlan:
    """The kernels of one group of linears: `single` below `from_rows` rows, `many` from there on."""

    single: str
    many: str
    from_rows: int  # 2..MAX_ROWS (only used when many != single)

    def kernel(self, rows: int) -> str:
        """The kernel a call over `rows` rows runs on."""
        return self.many if rows >= self.from_rows else self.single

    @property
    def uniform(self) -> bool:
        """One kernel for every size."""
        return self.single == self.many

    def describe(self) -> str:
        """e.g. "F.linear below 3 rows, oneDNN from 3"."""
        if self.uniform:
            return _SHORT[self.single]
        return f"{_SHORT[self.single]} below {self.from_rows} rows, {_SHORT[self.many]} from {self.from_rows}"


@dataclass(frozen=True)
class LinearPlan:
    """Per group of linears, the kernel by fed rows."""

    layers: GroupPlan
    head: GroupPlan

    @classmethod
    def uniform(cls, kernel: str) -> LinearPlan:
        """Every linear on `kernel` at every size (the torch and onednn paths)."""
        one = GroupPlan(kernel, kernel, MAX_ROWS + 1)
        return cls(one, one)

    def kernels(self) -> set[str]:
        """Every kernel some call may run on."""
        return {g.single for g in (self.layers, self.head)} | {g.many for g in (self.layers, self.head)}

    @property
    def mixed(self) -> bool:
        """True when a call's size or group decides its kernel."""
        return len(self.kernels()) > 1

    def describe(self) -> str:
        """e.g. "layers F.linear; LM head F.linear below 3 rows, oneDNN from 3"."""
        return f"layers {self.layers.describe()}; LM head {self.head.describe()}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LinearPlan:
        """Inverse of to_dict; ValueError on anything else."""
        try:
            plan = cls(GroupPlan(**data["layers"]), GroupPlan(**data["head"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a forward plan: {exc}") from None
        if not plan.kernels() <= set(KERNEL_NAMES):
            raise ValueError(f"unknown kernel in plan {sorted(plan.kernels())}; allowed: {list(KERNEL_NAMES)}")
        return plan


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
    """What a plan depends on: CPU, torch, threads, dtype and the shapes of the measured linears."""
    layer = _layer_modules(model)
    shapes = [tuple(m.weight.shape) for m in layer] + [tuple(model.lm_head.weight.shape)]
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return f"{_cpu_name()}|torch {torch.__version__}|threads {torch.get_num_threads()}|{dtype}|{shapes}"


def plan_for(model: torch.nn.Module, static: str, measure: Callable[..., dict] | None = None) -> LinearPlan:
    """The cached plan for this model's shapes on this machine, measured (and cached) the first time."""
    key = f"{machine_key(model)}|static {static}"
    path = cache_file()
    persist = measuring_enabled()  # with plans off (tests), a forced plan is measured but never stored or read
    cached = _read_cache(path) if persist else {}
    if key in cached:
        try:
            return LinearPlan.from_dict(cached[key])
        except ValueError:
            pass  # a stale or broken entry: measured again below
    times = (measure or measure_forwards)(model)
    plan = fit_plan(times, static)
    if persist:
        cached = _read_cache(path)  # another process may have written meanwhile
        cached[key] = plan.to_dict()
        _write_cache(path, cached)
    return plan


def measure_forwards(model: torch.nn.Module, repeats: int = REPEATS) -> dict[str, dict[int, float]]:
    """Median seconds of the engine's whole forward over 1..MAX_ROWS new tokens, by kernel combination.

    Whole forwards, not linears alone: a linear timed in a loop reads weights its previous call left in
    the cache, which a forward streaming every layer and the LM head never does (measured here: the 8 MB
    head of the bundled target on oneDNN beat F.linear 331 vs 591 us for 5 rows alone, but the whole
    5-row forward only 2.14 vs 2.18 ms). One forward holds both kernels of both groups; its switches
    select each combination, every size and combination interleaved after a context of CONTEXT tokens,
    each timed call after an untimed one on the same combination.
    """
    from engine.kv import crop_cache, position_limit
    from engine.llama import LlamaForward

    kernels = available_kernels(model)
    forwards = {}  # one forward per kernel for "many", holding the single-row kernel too: every combination
    for many in kernels[1:]:
        both = GroupPlan(kernels[0], many, 1)
        forwards[many] = LlamaForward(model, plan=LinearPlan(both, both))
    vocab = int(model.config.vocab_size)
    context = min(CONTEXT, (position_limit(model) or CONTEXT + MAX_ROWS) - MAX_ROWS)
    tokens = [(t * 7919 + 13) % vocab for t in range(context + MAX_ROWS)]
    combos = [f"{layers}/{head}" for layers in kernels for head in kernels]
    samples: dict[str, dict[int, list[float]]] = {c: {r: [] for r in range(1, MAX_ROWS + 1)} for c in combos}
    never = MAX_ROWS + 1
    with torch.inference_mode():
        caches = {}
        for many, forward in forwards.items():
            caches[many] = forward.new_cache()
            forward(caches[many], tokens[:context])
        for _ in range(repeats):
            for rows in range(1, MAX_ROWS + 1):
                fed = tokens[context : context + rows]
                for combo in combos:
                    layers, head = combo.split("/")
                    # the forward whose `many` kernel the combination needs (any, if it needs none)
                    many = next((k for k in (layers, head) if k != kernels[0]), kernels[1])
                    forward, cache = forwards[many], caches[many]
                    forward.switches["layers"].from_rows = 1 if layers != kernels[0] else never
                    forward.switches["head"].from_rows = 1 if head != kernels[0] else never
                    if {layers, head} - {kernels[0], many}:  # two different copying kernels: not measured
                        continue
                    forward(cache, fed, keep=rows)  # untimed: caches warm for this combination
                    crop_cache(cache, context)
                    t0 = time.perf_counter()
                    forward(cache, fed, keep=rows)
                    samples[combo][rows].append(time.perf_counter() - t0)
                    crop_cache(cache, context)
    return {c: {r: statistics.median(v) for r, v in by_rows.items()} for c, by_rows in samples.items() if by_rows[1]}


def available_kernels(model: torch.nn.Module) -> tuple[str, ...]:
    """The kernels a plan may use for `model` here, F.linear first (oneDNN: CPU builds with it, fp32 / bf16)."""
    from engine.llama import ONEDNN_DTYPES

    weight = next(model.parameters())
    onednn = weight.device.type == "cpu" and torch.backends.mkldnn.is_available() and weight.dtype in ONEDNN_DTYPES
    return ("torch", "transposed", *(("onednn",) if onednn else ()))


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


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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
