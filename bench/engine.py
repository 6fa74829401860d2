"""`bench engine`: spectune's decode loop against transformers `generate`, on the same weights and prompts.

Cases (greedy, exactly max_new_tokens new tokens on both sides, EOS ignored on both):
  spectune plain        vs  transformers greedy generate
  spectune ngram        vs  transformers prompt lookup        (gamma G, max n-gram 2)
  spectune draft_model  vs  transformers assisted generation  (G tokens per draft, constant, no confidence stop)
  spectune suffix       vs  spectune plain
All cases run in one process, interleaved per repeat (for each prompt, every case in a fixed order) after
one untimed warm-up pass, so machine drift hits every case alike. The warm-up pass also records every target
forward (spectune: its forward's observers, whatever the numeric path; transformers: a forward pre-hook on the
module) to measure acceptance and tokens per target forward; timed repeats run without hooks. Then the cost
profile of every numeric path on the same weights (bench/costs.py).
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from agents.recording import first_divergence
from bench.costs import limit_rows, paths_costs, step_profile_rows, synchronize
from bench.prompts import PROMPTS, QUICK_PROMPTS, Prompt
from common.build_once import build_once
from common.cache import cache_root
from common.errors import ConfigError
from engine.eagle3 import Eagle3Module, load_eagle3, random_eagle3
from engine.engine import Engine, EngineConfig
from engine.forward import PATHS, make_forward
from engine.loading import LoadedModel, load_model, tokenizer_difference
from engine.mtp import MtpModule, load_mtp, random_mtp
from engine.profile import StepProfile

PROMPT_SETS = ("builtin", "swe-lite")  # generic texts | agent contexts from the swe-lite suite

MIN_REPEATS = 5

# (layers, hidden, seed) of the tiny models built when no --model is given.
TINY_TARGET = (4, 256, 0)
TINY_DRAFT = (1, 128, 1)
QUICK_TARGET = (2, 64, 0)
QUICK_DRAFT = (1, 32, 1)

# ratio key -> (numerator case, denominator case); > 1 means the numerator is faster.
RATIOS: dict[str, tuple[str, str]] = {
    "plain_vs_transformers": ("spectune_plain", "transformers_greedy"),
    "ngram_vs_transformers": ("spectune_ngram", "transformers_prompt_lookup"),
    "draft_vs_transformers": ("spectune_draft_model", "transformers_assisted"),
    "ngram_on_vs_off": ("spectune_ngram", "spectune_plain"),
    "suffix_on_vs_off": ("spectune_suffix", "spectune_plain"),
    "draft_on_vs_off": ("spectune_draft_model", "spectune_plain"),
    **{f"mtp_g{g}_on_vs_off": (f"spectune_mtp_g{g}", "spectune_plain") for g in (1, 2, 3, 4)},
    **{f"mtp_g{g}_vs_draft": (f"spectune_mtp_g{g}", "spectune_draft_model") for g in (1, 2, 3, 4)},
    **{f"eagle3_g{g}_on_vs_off": (f"spectune_eagle3_g{g}", "spectune_plain") for g in (1, 2, 3, 4)},
    **{f"eagle3_g{g}_vs_mtp": (f"spectune_eagle3_g{g}", f"spectune_mtp_g{g}") for g in (1, 2, 3, 4)},
    **{f"layer_skip_k{k}_on_vs_off": (f"spectune_layer_skip_k{k}", "spectune_plain") for k in (1, 2)},
    "layer_skip_k1_vs_transformers": ("spectune_layer_skip_k1", "transformers_early_exit_k1"),
    "mtp_ngram_first_on_vs_off": ("spectune_mtp_ngram_first", "spectune_plain"),
    "mtp_ngram_extend_on_vs_off": ("spectune_mtp_ngram_extend", "spectune_plain"),
}
MTP_GAMMAS = (1, 2, 3, 4)
LAYER_SKIPS = (1, 2)
# identity check -> (case, reference case): greedy outputs that must be equal token for token.
IDENTITY: dict[str, tuple[str, str]] = {
    "plain_vs_transformers": ("spectune_plain", "transformers_greedy"),
    "ngram_vs_transformers": ("spectune_ngram", "transformers_prompt_lookup"),
    "draft_vs_transformers": ("spectune_draft_model", "transformers_assisted"),
    "ngram_vs_plain": ("spectune_ngram", "spectune_plain"),
    "suffix_vs_plain": ("spectune_suffix", "spectune_plain"),
    "draft_vs_plain": ("spectune_draft_model", "spectune_plain"),
    **{f"mtp_g{g}_vs_plain": (f"spectune_mtp_g{g}", "spectune_plain") for g in MTP_GAMMAS},
    **{f"eagle3_g{g}_vs_plain": (f"spectune_eagle3_g{g}", "spectune_plain") for g in MTP_GAMMAS},
    **{f"layer_skip_k{k}_vs_plain": (f"spectune_layer_skip_k{k}", "spectune_plain") for k in LAYER_SKIPS},
    "layer_skip_k1_vs_transformers": ("spectune_layer_skip_k1", "transformers_early_exit_k1"),
    "mtp_ngram_first_vs_plain": ("spectune_mtp_ngram_first", "spectune_plain"),
    "mtp_ngram_extend_vs_plain": ("spectune_mtp_ngram_extend", "spectune_plain"),
}
# spectune case -> (the drafter row of the limit table, its ON/OFF ratio key)
DRAFTER_CASES: dict[str, tuple[str, str]] = {
    "spectune_ngram": ("ngram", "ngram_on_vs_off"),
    "spectune_suffix": ("suffix", "suffix_on_vs_off"),
    "spectune_draft_model": ("draft_model", "draft_on_vs_off"),
    **{f"spectune_mtp_g{g}": (f"mtp_g{g}", f"mtp_g{g}_on_vs_off") for g in MTP_GAMMAS},
    **{f"spectune_eagle3_g{g}": (f"eagle3_g{g}", f"eagle3_g{g}_on_vs_off") for g in MTP_GAMMAS},
    **{f"spectune_layer_skip_k{k}": (f"layer_skip_k{k}", f"layer_skip_k{k}_on_vs_off") for k in LAYER_SKIPS},
    "spectune_mtp_ngram_first": ("mtp+ngram first", "mtp_ngram_first_on_vs_off"),
    "spectune_mtp_ngram_extend": ("mtp+ngram extend", "mtp_ngram_extend_on_vs_off"),
}
FORWARD_DEFINITION = (
    "new tokens / target-model forward calls, every call counted (prefill included) by the same forward "
    "pre-hook on both sides; spectune prefills prompt[:-1] in a forward that emits no token, transformers' "
    "first forward covers the whole prompt (plus any draft) and emits one"
)
RATIO_DEFINITION = (
    "median over repeats of the per-repeat tokens/s ratio (both cases measured in the same interleaved repeat)"
)


def cache_dir() -> Path:
    """Where tiny benchmark models are kept: the cache root's bench/ ($SPECTUNE_CACHE, else ~/.cache/spectune)."""
    return cache_root("bench")


def tiny_models(quick: bool, root: Path | None = None) -> tuple[Path, Path]:
    """Folders of the tiny target and draft (built on first use), sharing one tokenizer."""
    from engine.tiny import make_tiny_model

    root = root or cache_dir()
    (tl, th, ts), (dl, dh, ds) = (QUICK_TARGET, QUICK_DRAFT) if quick else (TINY_TARGET, TINY_DRAFT)
    target = build_once(
        root / f"tiny-llama-l{tl}-h{th}-s{ts}",
        lambda p: make_tiny_model(p, arch="llama", layers=tl, hidden=th, seed=ts),
    )
    draft = build_once(
        root / f"tiny-llama-l{dl}-h{dh}-s{ds}-tok-{target.name}",
        lambda p: make_tiny_model(p, arch="llama", layers=dl, hidden=dh, seed=ds, tokenizer_from=target),
    )
    return target, draft


def _in_draft_ids(target: LoadedModel, draft: LoadedModel, prompt: list[int]) -> list[int]:
    """`prompt` (target ids) as the draft's own ids of the same text."""
    text = target.tokenizer.decode(prompt, skip_special_tokens=False)
    return draft.tokenizer.encode(text, add_special_tokens=False)


def model_info(m: LoadedModel) -> dict[str, Any]:
    """What the report says about a model."""
    cfg = m.model.config
    return {
        "path": m.path,
        "arch": cfg.model_type,
        "layers": int(cfg.num_hidden_layers),
        "hidden": int(cfg.hidden_size),
        "vocab": int(cfg.vocab_size),
        "parameters": sum(p.numel() for p in m.model.parameters()),
        "dtype": str(m.dtype).removeprefix("torch."),
        "forward": m.forward.choice.describe(),
    }


def path_costs(model: LoadedModel, prompt: list[int], repeats: int) -> dict[str, Any]:
    """Costs on every numeric path this model can run here (engine/forward.py), interleaved, by path name."""
    forwards, unavailable = {}, {}
    for path in PATHS[1:]:  # every concrete path ("auto" is one of them)
        try:
            forwards[path] = model.forward if model.forward.choice.path == path else make_forward(model.model, path)
        except ValueError as exc:  # not available for this model / dtype / device
            unavailable[path] = {"unavailable": str(exc)}
    return paths_costs(model, prompt, forwards, repeats=repeats) | unavailable


# ---------------------------------------------------------------------------------------------- cases


@dataclass
class Case:
    """One way of generating: `run(prompt_index)` returns the raw output, `tokens(raw, prompt_index)` the new ids."""

    name: str
    side: str  # "spectune" | "transformers"
    run: Callable[[int], Any]
    tokens: Callable[[Any, int], list[int]]
    before_repeat: Callable[[], None] = lambda: None  # untimed, at the start of every pass
    engine_stats: Callable[[Any], Any] | None = None  # spectune: raw -> GenerationStats
    engine: Engine | None = None  # spectune: the engine (its step profile is read with --profile)


def _spectune_case(name: str, engine: Engine, prompts: list[list[int]], max_new: int) -> Case:
    no_stop: frozenset[int] = frozenset()  # ignore EOS: exactly max_new tokens

    def run(i: int):
        return engine.generate(prompts[i], max_new, stop_tokens=no_stop)

    before = engine.reset_drafter_state
    return Case(name, "spectune", run, lambda raw, i: raw.tokens, before, lambda raw: raw.stats, engine)


def _transformers_case(
    name: str, model: torch.nn.Module, inputs: list[torch.Tensor], max_new: int, **kwargs: Any
) -> Case:
    masks = [torch.ones_like(x) for x in inputs]

    def run(i: int):
        # eos_token_id=None (a generate kwarg overrides the model's generation_config, which lists eos ids):
        # no EOS stopping criterion and no EOS in prompt-lookup drafts, so exactly max_new tokens come out.
        # min_new_tokens is not used: it masks EOS logits, which would change greedy output.
        return model.generate(
            inputs[i],
            attention_mask=masks[i],
            do_sample=False,
            max_new_tokens=max_new,
            eos_token_id=None,
            **kwargs,
        )

    return Case(name, "transformers", run, lambda raw, i: raw[0, inputs[i].shape[1] :].tolist())


def configure_assistant(draft: torch.nn.Module, gamma: int) -> None:
    """Make transformers' assisted generation draft exactly `gamma` tokens per step.

    transformers 5.24 reads these from the *assistant's* generation_config (AssistedCandidateGenerator copies
    `assistant_model.generation_config`, then fills only unset fields with the global defaults
    num_assistant_tokens=20 and assistant_confidence_threshold=0.4); generate kwargs do not reach it.
    A threshold of 0 disables both the ConfidenceCriteria early stop (added only when > 0) and its
    ROC-based threshold adaptation (skipped when the threshold is falsy).

    EOS is ignored in this benchmark, but `eos_token_id=None` passed to the target's generate does not reach
    the assistant: its own generate treats None as unset and refills it from the assistant's generation_config,
    so the draft would stop at an EOS token (spectune's drafter never does, and the two sides would draft
    different amounts). Clearing the assistant's eos makes both sides do the same drafting work.
    """
    gc_ = draft.generation_config
    gc_.num_assistant_tokens = gamma
    gc_.num_assistant_tokens_schedule = "constant"
    gc_.assistant_confidence_threshold = 0.0
    gc_.eos_token_id = None


def build_cases(
    target: LoadedModel,
    draft: LoadedModel | None,
    prompts: list[list[int]],
    gamma: int,
    max_new: int,
    mtp: MtpModule | None = None,
    eagle3: Eagle3Module | None = None,
) -> tuple[list[Case], dict[str, str]]:
    """Every case in its fixed order, plus the cases skipped and why. Engines are built here, once."""
    inputs = [torch.tensor([p], device=target.device) for p in prompts]
    tm = target.model

    def spec(name: str, **cfg: Any) -> Case:
        engine = Engine(target, EngineConfig(**cfg), draft=draft, mtp=mtp, eagle3=eagle3)  # each keeps what it needs
        return _spectune_case(name, engine, prompts, max_new)

    cases = [
        spec("spectune_plain", drafter="none"),
        _transformers_case("transformers_greedy", tm, inputs, max_new),
        spec("spectune_ngram", drafter="ngram", gamma=gamma, options={"min_match": 1, "max_match": 2}),
        _transformers_case(
            "transformers_prompt_lookup",
            tm,
            inputs,
            max_new,
            prompt_lookup_num_tokens=gamma,
            max_matching_ngram_size=2,
        ),
    ]
    skipped: dict[str, str] = {}
    if draft is not None:
        configure_assistant(draft.model, gamma)
        drafting = spec("spectune_draft_model", drafter="draft_model", gamma=gamma, gamma_policy="fixed")
        cases.append(drafting)
        if drafting.engine.tokenizer_pair is None:
            cases.append(_transformers_case("transformers_assisted", tm, inputs, max_new, assistant_model=draft.model))
        else:
            # transformers' universal assisted generation (tokenizer= / assistant_tokenizer=) fails on the swe-lite
            # prompts here: one of its assistant forwards gets 0 tokens (RuntimeError in the draft's attention).
            skipped["transformers_assisted"] = (
                "the draft has another tokenizer: transformers' universal assisted generation, which would run it, "
                "fails on these prompts (an assistant forward of 0 tokens), not measured"
            )
    else:
        why = "no draft model (--draft DIR): unsupported, not measured"
        skipped = {"spectune_draft_model": why, "transformers_assisted": why}
    cases.append(spec("spectune_suffix", drafter="suffix", gamma=gamma))
    if mtp is not None:
        cases += [spec(f"spectune_mtp_g{g}", drafter="mtp", gamma=g) for g in MTP_GAMMAS]
        ngram = {"ngram.min_match": 1, "ngram.max_match": 2}
        cases += [
            spec(f"spectune_mtp_ngram_{p}", drafter="mtp+ngram", gamma=gamma, options={"policy": p, **ngram})
            for p in ("first", "extend")
        ]
    else:
        why = "no MTP module (--mtp DIR): unsupported, not measured"
        names = [f"spectune_mtp_g{g}" for g in MTP_GAMMAS] + ["spectune_mtp_ngram_first", "spectune_mtp_ngram_extend"]
        skipped.update(dict.fromkeys(names, why))
    if eagle3 is not None:
        cases += [spec(f"spectune_eagle3_g{g}", drafter="eagle3", gamma=g) for g in MTP_GAMMAS]
    else:
        skipped.update(
            dict.fromkeys([f"spectune_eagle3_g{g}" for g in MTP_GAMMAS], "no EAGLE-3 head (--eagle3 DIR): not measured")
        )
    for k in LAYER_SKIPS:
        if k < target.num_layers:
            cases.append(spec(f"spectune_layer_skip_k{k}", drafter="layer_skip", gamma=gamma, options={"layers": k}))
        else:
            skipped[f"spectune_layer_skip_k{k}"] = f"the target has {target.num_layers} layers: nothing to skip"
    if 1 < target.num_layers:
        # transformers' own self-speculation: the first k layers and the LM head draft (EarlyExitCandidateGenerator)
        cases.append(
            _transformers_case(
                "transformers_early_exit_k1", tm, inputs, max_new, assistant_early_exit=1, num_assistant_tokens=gamma
            )
        )
    return cases, skipped


# ----------------------------------------------------------------------------------- forward counting


@dataclass
class ForwardLog:
    """Target-model forward calls: (first position, fed token ids) per call.

    spectune's engine reports its calls through its forward's observers (whatever its numeric path),
    transformers' `generate` through a pre-hook on the module; `side` says which one the current case
    uses, so a spectune forward on transformers' path is not counted twice.
    """

    calls: list[tuple[int, list[int]]] = field(default_factory=list)
    side: str = "spectune"

    def hook(self, module, args, kwargs) -> None:
        if self.side != "transformers":
            return
        ids = kwargs.get("input_ids")
        if ids is None:
            ids = args[0]
        cache = kwargs.get("cache")
        if cache is None:
            cache = kwargs.get("past_key_values")
        start = cache.get_seq_length() if cache is not None else 0
        self.calls.append((int(start), ids[0].tolist()))

    def observe(self, start: int, tokens: list[int]) -> None:
        if self.side == "spectune":
            self.calls.append((int(start), list(tokens)))


@dataclass
class CallCounter:
    """Counts forward calls of the draft model (module hook for transformers, observer for spectune)."""

    n: int = 0
    side: str = "spectune"

    def hook(self, module, args, kwargs) -> None:
        self.n += self.side == "transformers"

    def observe(self, start: int, tokens: list[int]) -> None:
        self.n += self.side == "spectune"


def analyse_forwards(calls: list[tuple[int, list[int]]], prompt_len: int, output: list[int]) -> dict[str, int]:
    """Target forwards, drafts, drafted and accepted tokens, from the fed tokens alone.

    A fed token is a draft candidate when it lies past the prompt and is not the first token of its call
    (the first is the last token already emitted, or the prompt's start). Greedy verification keeps the
    longest prefix of candidates equal to the final output at their positions (so a candidate past the
    output's end counts as drafted, not accepted): the same counts spectune's stats keep.
    """
    drafts = drafted = accepted = 0
    for start, fed in calls:
        cands = [(start + j, tok) for j, tok in enumerate(fed) if j > 0 and start + j >= prompt_len]
        if not cands:
            continue
        drafts += 1
        drafted += len(cands)
        for pos, tok in cands:
            k = pos - prompt_len
            if k >= len(output) or output[k] != tok:
                break
            accepted += 1
    return {"target_forwards": len(calls), "drafts": drafts, "drafted": drafted, "accepted": accepted}


def summarise_acceptance(per_prompt: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over prompts plus the derived rates (same definitions as engine.stats)."""
    keys = ("new_tokens", "target_forwards", "drafts", "drafted", "accepted", "draft_model_forwards")
    tot = {k: sum(p[k] for p in per_prompt) for k in keys}
    tot["acceptance_rate"] = tot["accepted"] / tot["drafted"] if tot["drafted"] else 0.0
    tot["mean_accepted_length"] = 1.0 + tot["accepted"] / tot["drafts"] if tot["drafts"] else 1.0
    tot["mean_draft_length"] = tot["drafted"] / tot["drafts"] if tot["drafts"] else 0.0
    tot["tokens_per_target_forward"] = tot["new_tokens"] / tot["target_forwards"] if tot["target_forwards"] else 0.0
    return tot


# ------------------------------------------------------------------------------------------ measuring


class _Progress:
    """Progress on stderr: a rich bar on a terminal, else one line per pass."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled
        self.bar = None
        if enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("bench engine", total=total)

    def step(self, description: str) -> None:
        if self.bar is not None:
            self.bar.update(self.task, advance=1, description=description)

    def line(self, text: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.console.print(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def measure(
    cases: list[Case],
    prompts: list[list[int]],
    names: list[str],
    max_new: int,
    repeats: int,
    target: LoadedModel,
    draft: LoadedModel | None,
    progress: bool = True,
    profile: bool = False,
) -> dict[str, Any]:
    """Warm-up pass (hooked: tokens and forward counts), then `repeats` timed interleaved passes.

    `profile`: the timed passes of every spectune case also record where each step's time goes
    (engine/profile.py), returned under `step_profile` by case.
    """
    prog = _Progress(total=(repeats + 1) * len(prompts) * len(cases), enabled=progress)
    reference: dict[str, list[list[int]]] = {}
    acceptance: dict[str, Any] = {}
    seconds = {c.name: [[0.0] * len(prompts) for _ in range(repeats)] for c in cases}
    counts = {c.name: [0] * repeats for c in cases}
    deterministic = True
    step_profiles: dict[str, StepProfile] = {}
    try:
        with torch.inference_mode():
            # Warm-up: untimed, with hooks, every case on every prompt.
            log, drafts_counter = ForwardLog(), CallCounter()
            handles = [target.model.register_forward_pre_hook(log.hook, with_kwargs=True)]
            target.forward.observers.append(log.observe)
            if draft is not None:
                handles.append(draft.model.register_forward_pre_hook(drafts_counter.hook, with_kwargs=True))
                draft.forward.observers.append(drafts_counter.observe)
            per_prompt: dict[str, list[dict[str, Any]]] = {c.name: [] for c in cases}
            engine_stats: dict[str, Any] = {}
            try:
                for c in cases:
                    c.before_repeat()
                for i, ids in enumerate(prompts):
                    for c in cases:
                        log.calls.clear()
                        drafts_counter.n = 0
                        log.side = drafts_counter.side = c.side
                        raw = c.run(i)
                        toks = c.tokens(raw, i)
                        _check_length(c.name, names[i], toks, max_new)
                        reference.setdefault(c.name, []).append(toks)
                        row = {"prompt": names[i], "new_tokens": len(toks)}
                        row |= analyse_forwards(log.calls, len(ids), toks)
                        row["draft_model_forwards"] = drafts_counter.n
                        per_prompt[c.name].append(row)
                        if c.engine_stats is not None:
                            s = c.engine_stats(raw)
                            engine_stats[c.name] = s if c.name not in engine_stats else engine_stats[c.name] + s
                        prog.step(f"warm-up {names[i]} {c.name}")
            finally:
                for h in handles:
                    h.remove()
                target.forward.observers.remove(log.observe)
                if draft is not None:
                    draft.forward.observers.remove(drafts_counter.observe)
            for c in cases:
                acceptance[c.name] = {"side": c.side, **summarise_acceptance(per_prompt[c.name])}
                acceptance[c.name]["per_prompt"] = per_prompt[c.name]
                if c.name in engine_stats:
                    s = engine_stats[c.name]
                    mine = {
                        "target_forwards": s.target_forwards,
                        "drafts": s.drafts,
                        "drafted": s.drafted,
                        "accepted": s.accepted,
                        "acceptance_rate": s.acceptance_rate,
                        "mean_accepted_length": s.mean_accepted_length,
                    }
                    acceptance[c.name]["engine_stats"] = mine
                    acceptance[c.name]["hook_matches_engine_stats"] = all(
                        acceptance[c.name][k] == mine[k] for k in ("target_forwards", "drafts", "drafted", "accepted")
                    )
            prog.line(f"warm-up done: {len(cases)} cases x {len(prompts)} prompts, {max_new} new tokens each")

            # Timed repeats: interleaved, no hooks; spectune's phase timers summed (bench costs' C, in-generation R).
            timed: dict[str, Any] = {}
            for c in cases:
                if profile and c.engine is not None:
                    c.engine.step_profile = StepProfile()
            for r in range(repeats):
                gc.collect()
                for c in cases:
                    c.before_repeat()
                for i in range(len(prompts)):
                    for c in cases:
                        t0 = time.perf_counter()
                        raw = c.run(i)
                        synchronize(target.device)  # CUDA work is asynchronous: wait before reading the clock
                        dt = time.perf_counter() - t0
                        toks = c.tokens(raw, i)
                        seconds[c.name][r][i] = dt
                        counts[c.name][r] += len(toks)
                        if c.engine_stats is not None:
                            s = c.engine_stats(raw)
                            timed[c.name] = s if c.name not in timed else timed[c.name] + s
                        deterministic &= toks == reference[c.name][i]
                        prog.step(f"repeat {r + 1}/{repeats} {names[i]} {c.name}")
                rates = ", ".join(f"{c.name} {counts[c.name][r] / sum(seconds[c.name][r]):.0f}" for c in cases)
                prog.line(f"repeat {r + 1}/{repeats} tokens/s: {rates}")
            for c in cases:
                if c.engine is not None and c.engine.step_profile is not None:
                    step_profiles[c.name] = c.engine.step_profile
                    c.engine.step_profile = None
            for name, s in timed.items():
                acceptance[name]["engine_stats"]["timed"] = {
                    "generations": repeats * len(prompts),
                    "target_forwards": s.target_forwards,
                    "draft_s": s.time_s.get("draft", 0.0),
                    "verify_s": s.time_s.get("verify", 0.0),  # prefill forwards apart
                }
    finally:
        prog.close()
        for c in cases:
            if c.engine is not None:
                c.engine.step_profile = None
    return {
        "step_profile": step_profiles,
        "reference": reference,
        "acceptance": acceptance,
        "seconds": seconds,
        "counts": counts,
        "deterministic": deterministic,
    }


def _check_length(case: str, prompt: str, tokens: list[int], max_new: int) -> None:
    if len(tokens) != max_new:
        raise RuntimeError(
            f"{case} generated {len(tokens)} tokens for prompt {prompt!r}, expected exactly {max_new}: "
            "the two sides would not do the same work"
        )


# ------------------------------------------------------------------------------------------- report


def identity_report(reference: dict[str, list[list[int]]], names: list[str]) -> dict[str, Any]:
    """Each identity check, per prompt, with the first divergence position when outputs differ."""
    out: dict[str, Any] = {}
    for key, (a, b) in IDENTITY.items():
        if a not in reference or b not in reference:
            continue
        rows = []
        for i, name in enumerate(names):
            pos = first_divergence(reference[a][i], reference[b][i])
            row: dict[str, Any] = {"prompt": name, "identical": pos is None, "first_divergence": pos}
            if pos is not None:
                row[a] = reference[a][i][max(0, pos - 2) : pos + 6]
                row[b] = reference[b][i][max(0, pos - 2) : pos + 6]
                row["window_start"] = max(0, pos - 2)
            rows.append(row)
        out[key] = {"case": a, "reference": b, "identical": all(r["identical"] for r in rows), "prompts": rows}
    return out


def build_report(
    meas: dict[str, Any],
    cases: list[Case],
    skipped: dict[str, str],
    names: list[str],
    setup: dict[str, Any],
) -> dict[str, Any]:
    """The JSON object printed by --json."""
    tps = {
        c.name: [
            n / s if s > 0 else 0.0
            for n, s in zip(meas["counts"][c.name], map(sum, meas["seconds"][c.name]), strict=True)
        ]
        for c in cases
    }
    report: dict[str, Any] = {}
    per_repeat: dict[str, list[float]] = {}
    skipped_ratios: dict[str, str] = {}
    for key, (a, b) in RATIOS.items():
        if a in tps and b in tps:
            per_repeat[key] = [x / y for x, y in zip(tps[a], tps[b], strict=True)]
            report[key] = statistics.median(per_repeat[key])
        else:
            report[key] = None
            skipped_ratios[key] = skipped.get(a) or skipped.get(b) or "case not measured"
    identity = identity_report(meas["reference"], names)
    report["identical"] = all(v["identical"] for v in identity.values())
    report["identity"] = identity
    report["deterministic"] = meas["deterministic"]
    report["skipped"] = {"ratios": skipped_ratios, "cases": dict(skipped)}
    report["tokens_per_s"] = {
        name: {"median": statistics.median(v), "min": min(v), "max": max(v)} for name, v in tps.items()
    }
    report["acceptance"] = meas["acceptance"]
    report["raw"] = {
        c.name: {
            "seconds": [sum(s) for s in meas["seconds"][c.name]],
            "tokens": meas["counts"][c.name],
            "tokens_per_s": tps[c.name],
            "per_prompt_seconds": meas["seconds"][c.name],
        }
        for c in cases
    }
    report["raw"]["ratios_per_repeat"] = per_repeat
    report["setup"] = setup
    return report


# ------------------------------------------------------------------------------------------------ run


def run_engine_bench(
    model: str | None,
    draft: str | None,
    repeats: int,
    max_new_tokens: int,
    gamma: int,
    quick: bool,
    progress: bool = True,
    prompt_set: str = "builtin",
    dtype: str = "float32",
    forward: str = "auto",
    device: str = "cpu",
    mtp: str | None = None,
    profile: bool = False,
    eagle3: str | None = None,
) -> dict[str, Any]:
    """Load (or build) the models, measure every case, return the report.

    `profile`: also where every spectune step's time goes, phase by phase (report `step_profile`).

    `dtype`, `device` and `forward` (the numeric path, engine/forward.py) apply to both models;
    transformers' cases always run transformers' own forward on the same weights.

    `prompt_set`: `builtin` (fixed generic texts, raw) or `swe-lite` (agent-context prompts of a few
    swe-lite test instances, through the model's chat template: bench/agent_prompts.py).
    """
    import transformers

    tiny = model is None
    if tiny:
        target_dir, draft_dir = tiny_models(quick)
        model, draft = str(target_dir), str(draft_dir)
    target = load_model(model, device=device, dtype=dtype, forward=forward)
    draft_m = load_model(draft, device=device, dtype=dtype, forward=forward) if draft is not None else None
    if mtp is not None:
        mtp_m = load_mtp(mtp, target.model)
    else:  # the tiny random models get a random MTP module: every case runs (mechanics, not acceptance)
        mtp_m = random_mtp(target.model, seed=0) if tiny else None
    if eagle3 is not None:
        eagle3_m = load_eagle3(eagle3, target.model)
    else:  # likewise a random EAGLE-3 head for the tiny random models
        eagle3_m = random_eagle3(target.model, seed=0) if tiny else None
    if prompt_set not in PROMPT_SETS:
        raise ConfigError(f"unknown prompt set {prompt_set!r}; allowed: {list(PROMPT_SETS)}")
    if prompt_set == "swe-lite":
        from bench.agent_prompts import agent_prompts

        agent = agent_prompts(target.tokenizer, "test", count=2 if quick else 4)
        prompts, names, kinds = [a.ids for a in agent], [a.name for a in agent], ["agent"] * len(agent)
    else:
        chosen: tuple[Prompt, ...] = QUICK_PROMPTS if quick else PROMPTS
        prompts = [target.tokenizer.encode(p.text, add_special_tokens=False) for p in chosen]
        names, kinds = [p.name for p in chosen], [p.kind for p in chosen]
    cases, skipped = build_cases(target, draft_m, prompts, gamma, max_new_tokens, mtp_m, eagle3_m)
    setup = {
        "device": str(target.device),
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        # Other processes on the machine skew CPU timings (with more threads than free cores, every OpenMP
        # barrier waits for a descheduled thread): the 1-minute load average before and after the run.
        "load_average_1m": {"start": _load()},
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "target": model_info(target),
        "draft": model_info(draft_m) if draft_m is not None else None,
        # how the draft's tokenizer differs from the target's (None: the same, or no draft): drafts go over as text
        "cross_tokenizer": tokenizer_difference(target, draft_m) if draft_m is not None else None,
        "gamma": gamma,
        "repeats": repeats,
        "max_new_tokens": max_new_tokens,
        "quick": quick,
        "greedy": True,
        "eos": "ignored on both sides (spectune stop_tokens=frozenset(), transformers eos_token_id=None)",
        "prompt_set": prompt_set,
        "prompts": [
            {"name": n, "kind": k, "tokens": len(ids)} for n, k, ids in zip(names, kinds, prompts, strict=True)
        ],
        "cases": [c.name for c in cases],
        "order": "per repeat: for each prompt, every case in the order of `cases`",
        "tokens_per_target_forward": FORWARD_DEFINITION,
        "ratio": RATIO_DEFINITION,
        "transformers_settings": {
            "transformers_greedy": {"do_sample": False},
            "transformers_prompt_lookup": {"prompt_lookup_num_tokens": gamma, "max_matching_ngram_size": 2},
            "transformers_assisted": {
                "num_assistant_tokens": gamma,
                "num_assistant_tokens_schedule": "constant",
                "assistant_confidence_threshold": 0.0,
                "eos_token_id": None,
                "set_on": "assistant_model.generation_config",
            },
        },
        "spectune_settings": {
            "spectune_ngram": {"gamma": gamma, "min_match": 1, "max_match": 2},
            "spectune_draft_model": {"gamma": gamma, "gamma_policy": "fixed"},
            "spectune_suffix": {"gamma": gamma, "reset_drafter_state": "before every pass"},
            "spectune_mtp_g*": {"gamma": "the case's", "mtp": mtp or ("random (tiny models)" if tiny else None)},
            "spectune_eagle3_g*": {
                "gamma": "the case's",
                "eagle3": eagle3 or ("random (tiny models)" if tiny else None),
            },
            "spectune_mtp_ngram_*": {
                "gamma": gamma,
                "policy": "the case's",
                "ngram.min_match": 1,
                "ngram.max_match": 2,
            },
            "spectune_layer_skip_k*": {"gamma": gamma, "layers": "the case's"},
            "transformers_early_exit_k1": {"assistant_early_exit": 1, "num_assistant_tokens": gamma},
        },
    }
    meas = measure(
        cases,
        prompts,
        names,
        max_new_tokens,
        repeats,
        target,
        draft_m,
        progress=progress,
        profile=profile,
    )
    # Cost profile on the longest prompt (the context a verification sees), after the timed passes.
    # Every available path is profiled on the same weights; the bound uses the path the engine ran.
    longest = max(prompts, key=len)
    profile_repeats = max(3 * repeats, 15)  # sub-millisecond forwards: more samples than the cases need
    paths = {"target": path_costs(target, longest, profile_repeats)}
    if draft_m is not None:
        # A draft with another tokenizer reads the same text in its own ids (and as many of them as it takes).
        own = longest if setup["cross_tokenizer"] is None else _in_draft_ids(target, draft_m, longest)
        paths["draft"] = path_costs(draft_m, own, profile_repeats)
    target_costs = paths["target"][target.forward.choice.path]
    draft_costs = paths["draft"][draft_m.forward.choice.path] if draft_m is not None else None
    setup["load_average_1m"]["end"] = _load()
    report = build_report(meas, cases, skipped, names, setup)
    report["costs"] = {"target": target_costs, "draft": draft_costs, "paths": paths}
    on_vs_off = {drafter: report.get(key) for drafter, key in DRAFTER_CASES.values()}
    cases_rows = {case: drafter for case, (drafter, _) in DRAFTER_CASES.items()}
    report["limits"] = limit_rows(report["acceptance"], on_vs_off, target_costs, draft_costs, gamma, cases_rows)
    if meas["step_profile"]:
        report["step_profile"] = step_profile_rows(meas["step_profile"], target_costs)
    return report


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # not available on this platform
        return None
