"""The study's constraints: VRAM, context and quality, as Optuna constraint values (<= 0: satisfied).

Each trial sets them with `Trial.set_constraint` (Optuna 5: TPE reads them from there, and they are
stored with the trial in every storage); the best configuration is the best *feasible* trial, and
the report names the constraint that excluded each infeasible one. A trial without them (one that
failed before measuring) counts as infeasible.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from common.units import GIB
from engine.drafters import resolve_drafter
from engine.engine import Engine, EngineConfig
from engine.kv import capacity_bound
from engine.memory import (
    ModelShape,
    eagle3_weight_bytes,
    estimate_memory,
    largest_context,
    model_shape,
    mtp_weight_bytes,
)
from serving import gguf_memory
from serving.gguf_file import GgufInfo, read_gguf

# Constraint name -> what a positive value means (for the report).
CONSTRAINTS = {
    "vram_gib": "needs more memory than the ceiling (GiB over)",
    "context_tokens": "the largest context that fits is shorter than the suite needed (tokens short)",
    "regressions": "solves fewer tasks than OFF (regressions over tuner.max_regressions)",
    "no_success": "no task succeeded",
}
ATTR_PREFIX = "constraint."


@dataclass(frozen=True)
class MemoryFacts:
    """What the memory model needs about the loaded models and the hardware."""

    target: ModelShape
    draft: ModelShape | None
    dtype: str  # the target's dtype as loaded (float32, bfloat16 ...)
    ceiling_bytes: int
    overhead_bytes: int
    measured_on_cuda: bool
    mtp_weight_bytes: int = 0  # the loaded MTP module's own tensors (the full LM head and embedding are the target's)
    eagle3_weight_bytes: int = 0  # the loaded EAGLE-3 head's own tensors (its LM head included; the embedding's shared)
    sessions: int = 1  # sessions served at once (a tuner.concurrency level): each with its KV at the context


def memory_facts(
    target_path: str, models: Any, draft: str | None, *, vram_gib: float, overhead_gib: float = 0.0
) -> MemoryFacts:
    """The memory model's facts for the loaded models (`draft`: the draft folder in use) under a VRAM ceiling."""
    target = model_shape(target_path)
    dtype = str(next(models.target.model.parameters()).dtype).removeprefix("torch.")
    mtp = getattr(models, "mtp", None)
    eagle3 = getattr(models, "eagle3", None)
    return MemoryFacts(
        target=target,
        draft=model_shape(draft) if draft else None,
        dtype=dtype,
        ceiling_bytes=int(vram_gib * GIB),
        overhead_bytes=int(overhead_gib * GIB),
        measured_on_cuda=models.target.device.type == "cuda",
        mtp_weight_bytes=mtp_weight_bytes(target, dtype, mtp.config.draft_vocab_size) if mtp is not None else 0,
        eagle3_weight_bytes=(
            eagle3_weight_bytes(target, dtype, eagle3.config.draft_vocab_size) if eagle3 is not None else 0
        ),
    )


@dataclass(frozen=True)
class ServedMemoryFacts:
    """What the GGUF memory model needs (serving.gguf_memory): the server's files, read from their metadata."""

    target: GgufInfo  # the one target file OFF and every ON load (its MTP layers included)
    draft: GgufInfo | None  # a draft model's file (server.draft_gguf / converted model.draft, or a DFlash draft)
    head: GgufInfo | None  # an EAGLE-3 head's file
    ceiling_bytes: int
    overhead_bytes: int
    cache_type_k: str = "f16"  # llama-server's -ctk
    cache_type_v: str = "f16"  # -ctv
    measured_on_cuda: bool = False  # the server's own memory is measured instead (ServerBackend.measures_memory)
    sessions: int = 1  # agents at once: slots of one server, each with its share of the pool at the context

    @property
    def dtype(self) -> str:
        """The target file's quantization, where the torch facts give a dtype."""
        return self.target.file_type


def served_memory_facts(server: Any, *, vram_gib: float, overhead_gib: float = 0.0) -> ServedMemoryFacts:
    """The GGUF memory model's facts for a llama-server run's files (runners.backends.ServerSettings)."""

    def info(path: Path | None) -> GgufInfo | None:
        return read_gguf(path) if path is not None else None

    return ServedMemoryFacts(
        target=read_gguf(server.target_gguf),
        draft=info(server.draft_gguf) or info(server.dflash_gguf),
        head=info(server.eagle3_gguf),
        ceiling_bytes=int(vram_gib * GIB),
        overhead_bytes=int(overhead_gib * GIB),
        cache_type_k=getattr(server, "cache_type_k", "f16"),
        cache_type_v=getattr(server, "cache_type_v", "f16"),
    )


def served_memory_figures(config: EngineConfig, facts: ServedMemoryFacts, needed_context: int) -> dict[str, Any]:
    """memory_figures for a llama-server trial: the files the configuration loads, at the KV types it runs."""
    needs = resolve_drafter(config.drafter).needs
    kwargs = {
        "slots": facts.sessions,
        "cache_type_k": facts.cache_type_k,
        "cache_type_v": facts.cache_type_v,
        "draft": facts.draft if (needs.draft_model or needs.server_draft) else None,
        "head": facts.head if needs.eagle3 else None,
        "mtp": needs.mtp,  # the file's MTP layers get their KV only when draft-mtp runs
    }
    estimate = gguf_memory.estimate(facts.target, context=needed_context * facts.sessions, **kwargs)
    return {
        "estimate": estimate,
        "estimate_bytes": estimate.total_bytes + facts.overhead_bytes,
        "largest_context": gguf_memory.largest_context(
            facts.target, facts.ceiling_bytes, overhead_bytes=facts.overhead_bytes, **kwargs
        )
        // facts.sessions,
    }


def drafted_length(config: EngineConfig) -> int:
    """The most tokens one step may draft (what the verification workspace must hold)."""
    if config.drafter == "none":
        return 0
    return config.max_gamma if config.gamma_policy == "heuristic" else config.gamma


def memory_figures(config: EngineConfig, facts: MemoryFacts | ServedMemoryFacts, needed_context: int) -> dict[str, Any]:
    """Estimated bytes at the suite's needed context and the largest context that fits the ceiling.

    The VRAM figure counts the most KV the engine's growing cache can have allocated for the needed
    context (engine.kv.capacity_bound); the largest fitting context counts held tokens, as a server
    that preallocates `-c` does. What the drafter adds comes from what it needs (a draft model's weights
    and KV, the MTP module's weights) and its own per-position state (the drafter class's hook), so a
    combination such as `mtp+ngram` is counted as the sum of its children. A llama-server run's facts are its
    GGUF files' (served_memory_figures).
    """
    if isinstance(facts, ServedMemoryFacts):
        return served_memory_figures(config, facts, needed_context)
    drafter, _ = Engine.validate(config)
    needs = drafter.needs
    draft = facts.draft if needs.draft_model else None
    kwargs = {
        "dtype": facts.dtype,
        "gamma": drafted_length(config),
        "draft": draft,
        "draft_dtype": facts.dtype if draft is not None else None,
        "overhead_bytes": facts.overhead_bytes,
        "drafter_weight_bytes": (facts.mtp_weight_bytes if needs.mtp else 0)
        + (facts.eagle3_weight_bytes if needs.eagle3 else 0),
        "drafter_bytes_per_token": drafter.state_bytes_per_token(facts.target, facts.dtype),
        "sessions": facts.sessions,
    }
    estimate = estimate_memory(facts.target, context=capacity_bound(needed_context), **kwargs)
    return {
        "estimate": estimate,
        "estimate_bytes": estimate.total,
        "largest_context": largest_context(facts.target, facts.ceiling_bytes, **kwargs),
    }


def constraint_values(
    *,
    memory_bytes: int,
    ceiling_bytes: int,
    needed_context: int,
    fitting_context: int,
    regressions: int | None,
    max_regressions: int,
    successes: int | None,
) -> dict[str, float]:
    """The constraint values of one trial (unknown parts, e.g. of a pruned trial, count as satisfied)."""
    return {
        "vram_gib": (memory_bytes - ceiling_bytes) / GIB,
        "context_tokens": float(needed_context - fitting_context),
        "regressions": 0.0 if regressions is None else float(regressions - max_regressions),
        "no_success": 1.0 if successes == 0 else 0.0,
    }


def store(trial: optuna.Trial, values: dict[str, float]) -> None:
    """Set the values as the trial's constraints (and keep a copy in user attributes for trials.jsonl)."""
    for name, value in values.items():
        trial.set_constraint(name, value)
        trial.set_user_attr(ATTR_PREFIX + name, value)


def violated(trial: optuna.trial.FrozenTrial) -> list[str]:
    """Names of the constraints a trial breaks (all of them when it has none recorded)."""
    recorded = trial.constraints
    return [name for name in CONSTRAINTS if float(recorded.get(name, 1.0)) > 0]


def feasible(trial: optuna.trial.FrozenTrial) -> bool:
    """Every constraint satisfied."""
    return not violated(trial)
