"""The one place that runs a model: new tokens at known positions over a KV cache, logits for the kept rows.

Every caller (the decode loop's prefill and verification, the draft model drafter, benchmarks) goes
through a forward built here, and makes its KV cache with that forward's `new_cache()`. The numeric
path is chosen once per loaded model (weights packed once, never per step):

    transformers  transformers' own forward (any architecture; the reference)
    torch         the engine's Llama-family forward (engine/llama.py), linears through F.linear
    onednn        the engine's Llama-family forward, linears through oneDNN with weights packed once (CPU)
    mixed         the engine's Llama-family forward, each group of linears (decoder layers, LM head) on the
                  kernel measured fastest for the call's fed rows: F.linear, oneDNN (fp32 / bf16) or a matmul
                  over weights stored [in, out] (engine/forward_plan.py; CPU)
    graphs        the engine's Llama-family forward with decode / verify steps replayed from CUDA graphs over a
                  static KV buffer (engine/graphs.py; CUDA only, opt-in until measured on a GPU)
    auto          onednn on a CPU with oneDNN for bf16 models from hidden size 256 and fp32 ones from 1024
                  (where it measured faster, ONEDNN_MIN_WIDTH), else torch, for a covered architecture;
                  then, on such a CPU from hidden size PLAN_MIN_WIDTH, the per-size plan measured on the
                  model's shapes (cached per machine): mixed where another kernel pays for some sizes;
                  transformers for any other architecture (with a one-line note)

Each path states what it needs (PATH_NEEDS: the devices it runs on, the kernel its calls use; a kernel's
own needs, e.g. oneDNN bf16's instruction sets, are engine/kernels.py's). `auto` and the plan only pick
what this machine runs (engine/host.py probes it once); a forced path it cannot run is one ValueError line
naming what is missing and the paths that run here.

A forward also reports each call to its `observers` (first position, fed tokens), which is how the
benchmarks count target forwards whatever the path.
"""

from __future__ import annotations

import copy
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from common.errors import ConfigError, UnsupportedConfig
from engine import llama
from engine.forward_plan import measuring_enabled, plan_for
from engine.host import Host
from engine.kernels import ONEDNN_DTYPES, LinearPlan, kernel_refusal
from engine.kv import new_cache, position_limit

log = logging.getLogger("spectune.forward")
PATHS = ("auto", "transformers", "torch", "onednn", "mixed", "graphs")
# Narrowest model (hidden size) for which auto takes oneDNN, by dtype. Measured on the project's CPU (AMD EPYC,
# AVX512-BF16; interleaved t_1 / t_5 of every path, 1 and 2 threads, 2026-12-01): bf16 through oneDNN is the
# fastest path from the bundled 4x256 target up (t_1 3.1 ms vs 4.0 on F.linear, flat in rows) but not on the
# 1x64 draft, where its per-call overhead dominates; fp32 through oneDNN only pays from ~1024 wide (6x1024: t_1
# tied, t_5 1.2-1.3 x t_1 against 1.7-1.9 on F.linear), while at 256 F.linear is faster for 1 and 5 rows alike
# (2.5 / 3.1 ms against 4.0 / 3.8).
ONEDNN_MIN_WIDTH = {torch.float32: 1024, torch.bfloat16: 256}
# Narrowest model whose per-size plan auto measures: below it a forward is all dispatch, and kernels do not matter.
PLAN_MIN_WIDTH = 128
GRAPH_CAPACITY = 8192  # positions of the graphs path's static KV buffer (at most the model's context)
Observer = Callable[[int, list[int]], None]


@dataclass(frozen=True)
class PathChoice:
    """Which numeric path a model runs on, and why (one line for every result's provenance)."""

    path: str  # transformers | torch | onednn | mixed | graphs
    dtype: str  # the weights' dtype, e.g. float32
    reason: str
    plan: LinearPlan | None = None  # the kernel of each group of linears by fed rows (mixed; auto when measured)

    def describe(self) -> str:
        """e.g. "onednn float32 (auto: engine llama forward, oneDNN-packed linears on CPU)"."""
        return f"{self.path} {self.dtype} ({self.reason})"


@dataclass(frozen=True)
class PathNeeds:
    """What a numeric path needs: the device types it runs on (None: any) and the kernel its linears use."""

    devices: tuple[str, ...] | None
    kernel: str | None  # engine/kernels.py's name; None: transformers' own forward
    why: str = ""  # why those devices only


PATH_NEEDS = {
    "transformers": PathNeeds(None, None),
    "torch": PathNeeds(None, "torch"),
    "onednn": PathNeeds(("cpu",), "onednn", "oneDNN-packed linears"),
    "mixed": PathNeeds(("cpu",), "torch", "it measures its plan on the CPU"),  # plus what its plan picks
    "graphs": PathNeeds(("cuda",), "torch", "CUDA graphs"),
}


def check_path(path: str) -> str:
    """`path` if it is a known forward path, else ValueError naming the allowed ones."""
    if path not in PATHS:
        raise ConfigError(f"unknown forward path {path!r}; allowed: {', '.join(PATHS)}")
    return path


def path_refusal(path: str, device: str, dtype: torch.dtype, host: Host | None = None) -> str | None:
    """None when `path` runs weights of `dtype` on `device` here (architecture aside), else why not, in one line."""
    needs = PATH_NEEDS[check_path(path)] if path != "auto" else PathNeeds(None, None)
    if needs.devices is not None and device not in needs.devices:
        wanted = " or ".join(d.upper() for d in needs.devices)
        return f"needs a {wanted} device ({needs.why}); the model is on {device}"
    return kernel_refusal(needs.kernel, device, dtype, host) if needs.kernel is not None else None


def runnable_paths(device: str, dtype: torch.dtype, covered: bool = True, host: Host | None = None) -> list[str]:
    """The paths a model of `dtype` on `device` can be forced onto here (auto first; only transformers if uncovered)."""
    paths = [p for p in PATH_NEEDS if covered or p == "transformers"]
    return ["auto", *(p for p in paths if path_refusal(p, device, dtype, host) is None)]


def choose_path(model: torch.nn.Module, path: str = "auto") -> PathChoice:
    """Resolve `path` for `model` (auto: the fastest path that computes the model's own maths and runs here)."""
    check_path(path)
    weight = next(model.parameters())
    dtype = str(weight.dtype).removeprefix("torch.")
    device = weight.device.type
    uncovered = llama.covers(model)
    if path == "transformers":
        return PathChoice("transformers", dtype, "forced: transformers' forward")
    if path != "auto":
        if uncovered is not None:
            raise ConfigError(
                f"forward path {path!r} needs the engine's Llama forward, which does not cover {uncovered}"
            )
        refusal = path_refusal(path, device, weight.dtype)
        if refusal is not None:
            works = ", ".join(runnable_paths(device, weight.dtype))
            raise ConfigError(
                f"forward path {path!r} cannot run {dtype} here: {refusal} (paths that run here: {works})"
            )
        return PathChoice(path, dtype, f"forced: {_WHAT[path]}")
    if uncovered is not None:
        return PathChoice("transformers", dtype, f"auto: the engine's Llama forward does not cover {uncovered}")
    width = int(model.config.hidden_size)
    if device != "cpu" or weight.dtype not in ONEDNN_MIN_WIDTH:
        return PathChoice("torch", dtype, f"auto: {_WHAT['torch']}")
    refusal = path_refusal("onednn", device, weight.dtype)
    if refusal is not None:
        return PathChoice("torch", dtype, f"auto: {_WHAT['torch']} ({refusal})")
    if width >= ONEDNN_MIN_WIDTH[weight.dtype]:
        return PathChoice("onednn", dtype, f"auto: {_WHAT['onednn']}")
    why = f"hidden size {width} < {ONEDNN_MIN_WIDTH[weight.dtype]}, where oneDNN starts to pay in {dtype}"
    return PathChoice("torch", dtype, f"auto: {_WHAT['torch']} ({why})")


_WHAT = {
    "torch": "engine llama forward, F.linear",
    "onednn": "engine llama forward, oneDNN-packed linears",
    "mixed": "engine llama forward, each group of linears on the kernel measured fastest for the fed rows",
    "graphs": "engine llama forward, F.linear, CUDA graphs for steps of up to 17 tokens",
}


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder layers of a causal LM (Llama-style `model.layers`, GPT-2's `transformer.h`, GPT-NeoX's)."""
    body, name = _body(model)
    return getattr(getattr(model, body), name)


def _body(model: torch.nn.Module) -> tuple[str, str]:
    """(attribute of the body on the causal LM, attribute of the layer list on the body)."""
    for body in ("model", "transformer", "gpt_neox"):
        inner = getattr(model, body, None)
        for name in ("layers", "h"):
            if isinstance(getattr(inner, name, None), torch.nn.ModuleList):
                return body, name
    raise UnsupportedConfig(f"cannot find the decoder layers of {type(model).__name__} (model.layers / transformer.h)")


def first_layers(model: torch.nn.Module, k: int) -> torch.nn.Module:
    """A view of `model` that runs only its first `k` decoder layers, then its final norm and LM head.

    Shallow copies of the causal LM and its body with their own module tables and a config saying k
    layers (transformers' forward loops over config.num_hidden_layers layers and builds its masks and
    caches from config.layer_types); every weight tensor is the model's own, nothing is copied.
    """
    body_name, layers_name = _body(model)
    layers = getattr(getattr(model, body_name), layers_name)
    if not 1 <= k < len(layers):
        raise UnsupportedConfig(
            f"first_layers: k={k} must be in [1, {len(layers) - 1}] for a {len(layers)}-layer model"
        )
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = k
    if getattr(config, "n_layer", None) is not None:
        config.n_layer = k
    if getattr(config, "layer_types", None):
        config.layer_types = list(config.layer_types)[:k]
    body = _shallow(getattr(model, body_name))
    body._modules[layers_name] = torch.nn.ModuleList(list(layers)[:k])
    body.config = config
    view = _shallow(model)
    view._modules[body_name] = body
    view.config = config
    return view


def _shallow(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of `module` sharing its parameters and submodules, with its own module table and no hooks.

    copy.copy alone would share the hook dictionaries too, so a hook registered on the original (a
    benchmark's forward counter) would fire on the view's forwards as well.
    """
    clone = copy.copy(module)
    clone._modules = dict(module._modules)
    for name, value in vars(module).items():
        if "hook" in name and isinstance(value, dict):
            setattr(clone, name, type(value)())
    return clone


def catch_output(into: list[torch.Tensor]):
    """A forward hook that appends a decoder layer's output hidden states [1, n, h] to `into`."""

    def hook(module, args, output) -> None:
        into.append(output[0] if isinstance(output, tuple) else output)

    return hook


def catch_input(into: list[torch.Tensor]):
    """A forward pre-hook (with_kwargs) that appends a decoder layer's input hidden states [1, n, h] to `into`."""

    def hook(module, args, kwargs) -> None:
        into.append(args[0] if args else kwargs["hidden_states"])

    return hook


def tap_hooks(model: torch.nn.Module, taps: tuple[int, ...]) -> tuple[list, list[list[torch.Tensor]]]:
    """Hooks on `model`'s decoder layers that catch the tapped states (llama.resolve_taps ids), one list per tap.

    Tap i < layers is layer i's input, tap == layers the last layer's output: only those are kept
    (output_hidden_states would hold every layer's for every fed token). Remove the handles after the forward.
    """
    layers = decoder_layers(model)
    handles, caught = [], []
    for t in taps:
        into: list[torch.Tensor] = []
        caught.append(into)
        if t < len(layers):
            handles.append(layers[t].register_forward_pre_hook(catch_input(into), with_kwargs=True))
        else:
            handles.append(layers[-1].register_forward_hook(catch_output(into)))
    return handles, caught


def _cache_keyword(model: torch.nn.Module) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class TransformersForward:
    """Calls a transformers causal LM on new tokens at known positions, appending to its DynamicCache.

    It knows how transformers names things (the cache keyword changed from `past_key_values` to
    `cache` in transformers 5.2x), so the decode loop and the drafters stay plain.
    """

    def __init__(self, model: torch.nn.Module, choice: PathChoice | None = None) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.choice = choice or choose_path(model, "transformers")
        self.observers: list[Observer] = []
        self._cache_kw = _cache_keyword(model)
        self._layers = len(decoder_layers(model))
        self._said_serial = False

    def new_cache(self) -> DynamicCache:
        """An empty KV cache that grows in place and crops exactly (engine.kv.new_cache)."""
        return new_cache(self.model)

    @torch.inference_mode()
    def __call__(
        self,
        cache: DynamicCache,
        tokens: list[int],
        keep: int = 1,
        hidden: llama.Taps = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits of the last `keep` positions [keep, V] (and, if asked, hidden states of every fed token).

        Positions are taken from the cache length (host-side int), so the caller keeps the cache
        cropped to exactly the tokens it has committed. `hidden` as llama.LlamaForward's: True for the
        trunk output [n, h] (the last decoder layer's, before the final norm), tap ids for those layers'
        inputs side by side [n, k h]; hooks catch just those (tap_hooks).
        """
        start = cache.get_seq_length()
        for observe in self.observers:
            observe(start, tokens)
        ids = torch.tensor([tokens], device=self.device)  # [1, n]
        pos = torch.arange(start, start + len(tokens), device=self.device)[None]  # [1, n]
        handles, caught = tap_hooks(self.model, llama.resolve_taps(hidden, self._layers))
        try:
            out = self.model(
                input_ids=ids,
                position_ids=pos,
                use_cache=True,
                logits_to_keep=keep,
                **{self._cache_kw: cache},
            )
        finally:
            for handle in handles:
                handle.remove()
        tapped = torch.cat([c[0][0] for c in caught], dim=-1) if caught else None  # [n, k h]
        return out.logits[0], tapped  # [keep, V]

    def many(
        self, caches: list, feeds: list[list[int]], keeps: list[int], hidden: llama.Taps = False
    ) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Several sessions' steps, one forward per session in order (transformers' caches do not batch ragged)."""
        if len(caches) > 1 and not self._said_serial:
            self._said_serial = True
            log.warning(
                "note: %s runs on transformers' forward, which serves a batch's sessions one at a time",
                type(self.model).__name__,
            )
        return [self(c, f, k, hidden) for c, f, k in zip(caches, feeds, keeps, strict=True)]


class EngineForward(llama.LlamaForward):
    """The engine's Llama-family forward with the same interface (observers, choice) as TransformersForward."""

    def __init__(self, model: torch.nn.Module, choice: PathChoice) -> None:
        super().__init__(model, kernel="onednn" if choice.path == "onednn" else "torch", plan=choice.plan)
        self.model = model
        self.choice = choice
        self.observers: list[Observer] = []
        self._graphs = None
        if choice.path == "graphs":
            from engine.graphs import GraphedSteps

            eager = super().__call__
            self._graphs = GraphedSteps(self, eager, min(position_limit(model) or GRAPH_CAPACITY, GRAPH_CAPACITY))

    def new_cache(self) -> llama.LlamaCache:
        """An empty KV cache (static, of the graphs' capacity, on the graphs path)."""
        return self._graphs.new_cache() if self._graphs is not None else super().new_cache()

    def __call__(self, cache, tokens, keep=1, hidden=False):
        """Logits of the last `keep` positions [keep, V] (and the hidden states `hidden` asks for, LlamaForward's)."""
        for observe in self.observers:
            observe(cache.get_seq_length(), tokens)
        if self._graphs is not None:
            return self._graphs(cache, tokens, keep, hidden)
        return super().__call__(cache, tokens, keep, hidden)

    def many(self, caches, feeds, keeps, hidden=False):
        """Several sessions' steps in one ragged forward (LlamaForward.many); a batch of one is a plain call.

        On the graphs path a batch runs eagerly over the sessions' static buffers (graphs are captured per
        session and k; per batch-size buckets are not captured yet).
        """
        if len(caches) == 1:
            return [self(caches[0], feeds[0], keeps[0], hidden)]
        for cache, tokens in zip(caches, feeds, strict=True):
            for observe in self.observers:
                observe(cache.get_seq_length(), tokens)
        return super().many(caches, feeds, keeps, hidden)


Forward = TransformersForward | EngineForward


def make_forward(model: torch.nn.Module, path: str = "auto") -> Forward:
    """The forward of `model` on `path` (see the module docstring), weights prepared once."""
    choice = choose_path(model, path)
    if choice.path == "mixed" or (path == "auto" and _plan_pays_off(model, choice)):
        choice = _planned(model, choice, forced=path == "mixed")
    if choice.path == "transformers":
        if path == "auto":  # one line, so a user knows why this model runs slower than a covered one
            log.warning("note: %s runs on transformers' forward: %s", type(model).__name__, choice.reason)
        return TransformersForward(model, choice)
    return EngineForward(model, choice)


def _plan_pays_off(model: torch.nn.Module, choice: PathChoice) -> bool:
    """auto measures a per-size plan for CPU models oneDNN runs, from PLAN_MIN_WIDTH wide."""
    weight = next(model.parameters())
    return (
        choice.path in ("torch", "onednn")
        and weight.dtype in ONEDNN_DTYPES
        and kernel_refusal("onednn", weight.device.type, weight.dtype) is None
        and int(model.config.hidden_size) >= PLAN_MIN_WIDTH
        and measuring_enabled()
    )


def _planned(model: torch.nn.Module, choice: PathChoice, forced: bool) -> PathChoice:
    """`choice` refined by the measured per-size plan (the static kernel where nothing else pays)."""
    static = "torch" if forced else choice.path
    plan = plan_for(model, static)
    how = "forced" if forced else "auto"
    kernel = plan.layers.single
    if plan.note:  # no measurement made this plan: the static kernel everywhere, and why
        return PathChoice(
            "mixed" if forced else kernel, choice.dtype, f"{how}: {_WHAT[kernel]} (plan {plan.note})", plan
        )
    if plan.mixed or forced or kernel not in _WHAT:  # a kernel no single path is named after runs as `mixed`
        return PathChoice("mixed", choice.dtype, f"{how}: engine llama forward; measured here: {plan.describe()}", plan)
    return PathChoice(kernel, choice.dtype, f"auto: {_WHAT[kernel]} (measured here at every size)", plan)
