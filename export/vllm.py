"""`vllm-speculative-config.json`: the configuration as vLLM 0.33.0's `--speculative-config` JSON.

Every key is a field of SpeculativeConfig in the pinned key set (export/reference/). That set records
`method: SpeculativeMethod | None` without the literal's values, so METHODS lists the values written here;
they are in SpeculativeMethod of vllm/config/speculative.py ("ngram", "draft_model", "suffix", the Eagle/MTP
types, "ngram_gpu"; 0.33.0 dropped "medusa" and "mlp_speculator"). Semantics from the docstrings of that file:
prompt_lookup_min/max bound the n-gram match; suffix_decoding_max_tree_depth bounds match plus speculation
length; max_spec_factor caps speculation at factor x prefix match length; min_token_prob keeps only tokens
whose frequency-count estimate reaches it; max_cached_requests sizes the global tree of past responses
(FIFO), 0 disables it and leaves the per-request prompt tree. max_model_len in SpeculativeConfig is the
draft's: the served context is the server argument --max-model-len.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.drafters.ngram import NgramOptions
from engine.drafters.suffix import SuffixOptions
from engine.engine import EngineConfig
from export.files import dumps_strict, write_atomic
from export.record import (
    APPROXIMATE,
    EXACT,
    NONE,
    ExportRecord,
    Mapping,
    draft_length,
    gamma_rows,
    lookup_child,
    no_equivalent,
    typed_options,
)

FILE = "vllm-speculative-config.json"
TARGET = "vLLM"
VERSION = "vLLM 0.33.0"
METHODS = ("ngram", "suffix", "draft_model")  # the SpeculativeMethod values this exporter writes
GLOBAL_TREE_REQUESTS = 10000  # vLLM's default suffix_decoding_max_cached_requests


def _row(setting: str, fit: str, reason: str) -> Mapping:
    return Mapping(setting, TARGET, fit, reason)


def _combined_row(drafter: str, child: str) -> Mapping:
    """A combination exports its lookup child alone; the model child has no equivalent (record.NO_EQUIVALENT)."""
    others = [p for p in drafter.split("+") if p != child]
    why = "; ".join(f"{o}: {no_equivalent(o, TARGET)}" for o in others)
    return _row(f"drafter={drafter}", APPROXIMATE, f"only the {child} part is exported ({why})")


def _ngram(engine: EngineConfig, o: NgramOptions) -> tuple[dict[str, Any], list[Mapping]]:
    config = {
        "method": "ngram",
        "num_speculative_tokens": draft_length(engine),
        "prompt_lookup_min": o.min_match,
        "prompt_lookup_max": o.max_match,
    }
    rows = [
        _row(
            "drafter=ngram",
            APPROXIMATE,
            "method ngram: prompt lookup in the request's own tokens, as spectune's; which of several equally "
            "long matches is copied, and copying past the end of a repeat, follow vLLM's own implementation",
        ),
        _row(
            f"ngram.min_match={o.min_match}, max_match={o.max_match}",
            EXACT,
            "prompt_lookup_min / prompt_lookup_max: the same window of match lengths, in tokens",
        ),
        _row(
            f"ngram.max_candidates={o.max_candidates}", NONE, "no key: vLLM does not bound the occurrences it examines"
        ),
        *gamma_rows(engine, TARGET, "num_speculative_tokens"),
    ]
    return config, rows


def _suffix(engine: EngineConfig, o: SuffixOptions) -> tuple[dict[str, Any], list[Mapping]]:
    length = draft_length(engine)
    session = o.scope == "session"
    config = {
        "method": "suffix",
        "num_speculative_tokens": length,
        "suffix_decoding_max_tree_depth": o.max_match + length,  # depth bounds match + speculation
        "suffix_decoding_max_spec_factor": o.match_factor,
        "suffix_decoding_min_token_prob": o.min_token_prob,
        "suffix_decoding_max_cached_requests": 0 if session else GLOBAL_TREE_REQUESTS,
    }
    if session:
        scope = _row(
            "suffix.scope=session",
            APPROXIMATE,
            "suffix_decoding_max_cached_requests=0 turns the global tree of past responses off and keeps the "
            "request's prompt tree; spectune's session index also holds the tokens generated so far in the request",
        )
    else:
        scope = _row(
            "suffix.scope=engine",
            APPROXIMATE,
            f"the global suffix tree caches past responses across requests like spectune's engine-wide index, "
            f"but evicts beyond {GLOBAL_TREE_REQUESTS} requests (FIFO) where spectune keeps every finished "
            "generation until the index is reset",
        )
    rows = [
        _row("drafter=suffix", EXACT, "method suffix: frequency-scored suffix-tree lookup (SuffixDecoding)"),
        scope,
        _row(
            f"suffix.min_match={o.min_match}, max_match={o.max_match}",
            APPROXIMATE,
            f"no minimum-match key; suffix_decoding_max_tree_depth = max_match + draft length = {o.max_match + length} "
            "bounds match plus speculation together",
        ),
        _row(
            f"suffix.match_factor={o.match_factor}", EXACT, "suffix_decoding_max_spec_factor: draft <= factor x match"
        ),
        _row(
            f"suffix.min_token_prob={o.min_token_prob}",
            APPROXIMATE,
            "suffix_decoding_min_token_prob: the same threshold on a frequency estimate, counted in vLLM's trees",
        ),
        _row(f"suffix.max_candidates={o.max_candidates}", NONE, "no key: the suffix tree examines every occurrence"),
        *gamma_rows(engine, TARGET, "num_speculative_tokens"),
    ]
    return config, rows


def _draft_model(engine: EngineConfig, draft: str | None) -> tuple[dict[str, Any], list[Mapping]]:
    config = {"method": "draft_model", "model": draft, "num_speculative_tokens": draft_length(engine)}
    rows = [
        _row("drafter=draft_model", EXACT, "method draft_model with model = the draft weights (same tokenizer)"),
        *gamma_rows(engine, TARGET, "num_speculative_tokens"),
    ]
    if engine.gamma_policy == "confidence":
        rows.append(
            _row(
                f"gamma_policy=confidence (confidence={engine.confidence})",
                NONE,
                "no key stops a draft model early on low confidence: vLLM drafts num_speculative_tokens = gamma",
            )
        )
    if engine.temperature > 0:
        rows.append(
            _row(
                f"temperature={engine.temperature} with a draft model",
                APPROXIMATE,
                "vLLM drafts greedily by default (draft_sample_method 'greedy'); spectune samples the draft: "
                "both lossless, acceptance can differ",
            )
        )
    return config, rows


def build(record: ExportRecord) -> tuple[dict[str, Any], list[Mapping]]:
    """The speculative config dict and the Mapping rows for vLLM."""
    engine = record.engine
    options, rule = typed_options(engine)
    rows = [_row(f"model={record.model_name}", EXACT, "vllm serve the same target weights")]
    if record.context > 0:
        rows.append(_row(f"context={record.context}", EXACT, "server argument --max-model-len (not in this JSON)"))
    rows.append(
        _row("one session at a time", EXACT, "server argument --max-num-seqs 1 reproduces spectune's single agent")
    )
    if engine.drafter == "none":
        config: dict[str, Any] = {}
        rows.append(_row("drafter=none", EXACT, "speculation off: start vLLM without --speculative-config"))
    elif engine.drafter == "ngram":
        config, more = _ngram(engine, options)
        rows += more
    elif engine.drafter == "suffix":
        config, more = _suffix(engine, options)
        rows += more
    elif engine.drafter == "draft_model":
        config, more = _draft_model(engine, record.draft)
        rows += more
    elif (child := lookup_child(engine, options)) is not None:
        config, more = (_ngram if child[0] == "ngram" else _suffix)(engine, child[1])
        rows += [_combined_row(engine.drafter, child[0]), *more]
    else:
        config = {}
        rows.append(_row(f"drafter={engine.drafter}", NONE, no_equivalent(engine.drafter, TARGET)))
    if rule.lossy:
        rows.append(
            _row(
                f"acceptance={engine.acceptance}",
                NONE,
                "vLLM 0.33.0 verifies losslessly (rejection_sample_method 'standard'): no lossy rule, so acceptance "
                "and speedup there are lower than measured with this rule",
            )
        )
    else:
        rows.append(_row("acceptance=exact", EXACT, "rejection_sample_method 'standard' (vLLM's default) is lossless"))
    rows.append(
        _row(
            f"sampling (temperature={engine.temperature}, top_k={engine.top_k}, top_p={engine.top_p})",
            EXACT,
            "per request: send the same temperature / top_p, and top_k -1 where spectune's is 0 (off)",
        )
    )
    return config, rows


def write(out_dir: Path, record: ExportRecord) -> tuple[Path, list[Mapping]]:
    """Write vllm-speculative-config.json into out_dir; returns its path and the Mapping rows."""
    config, rows = build(record)
    path = out_dir / FILE
    write_atomic(path, dumps_strict(config))
    return path, rows
