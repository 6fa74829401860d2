"""`extra-llm-api-options.yaml`: the configuration as TensorRT-LLM's `speculative_config` LLM API section.

`trtllm-serve MODEL --extra_llm_api_options extra-llm-api-options.yaml` reads the file; its one key,
`speculative_config`, holds `decoding_type` (which class of tensorrt_llm/llmapi/llm_args.py parses the section:
NGram, SA, Draft_Target, Eagle3) and that class's fields. Every key written is a field of the pinned class
(export/reference/, `tensorrt_llm.llmapi.llm_args.<Class>` nodes); semantics from the field descriptions of that
source: max_draft_len is the draft length; NGram's max_matching_ngram_size bounds the pattern searched,
is_use_oldest picks the oldest match (False: the newest), is_public_pool shares one pool across requests
(False: each request its own); SA matches the longest suffix (max_matching_ngram_size -1) in a GPU suffix
automaton, enable_global_pool searches every active request's automaton (at most 1024 slots, matches capped at
64 tokens); DecodingBaseConfig drafts greedily (its private _allow_greedy_draft_tokens) and verifies non-greedy
batches by exact match unless use_rejection_sampling (prototype) is set.

EAGLE-3 (`eagle3`): decoding_type Eagle3 with speculative_model = the head folder. eagle3_layers_to_capture
defaults to {1, num_layers // 2 - 1, num_layers - 4}, one less than the standard EAGLE-3 choice
(2, n // 2, n - 3) that spectune, llama.cpp and vLLM count as the residual entering layer L and SGLang as the
output of layer L (ids - 1): so TensorRT-LLM's id L is read here as the output of decoder layer L, and the head's
ids are written as ids - 1 (inferred from that default, not from the capture code: verify on the server).

Server arguments outside the LLM API section (--max_batch_size, --max_seq_len) go on the command in the header
comment; they are trtllm-serve options, not keys of the pinned set. Speculation off writes `{}`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from common.files import write_atomic
from engine.acceptance import AcceptanceRule
from engine.drafters.ngram import NgramOptions
from engine.drafters.suffix import SuffixOptions
from engine.engine import EngineConfig
from export.record import (
    APPROXIMATE,
    EXACT,
    NONE,
    ExportRecord,
    Mapping,
    draft_length,
    gamma_rows,
    model_draft_rows,
    other_tokenizer_reason,
    read_eagle3_head,
    typed_options,
)
from export.table import TRTLLM, Builder, Files, dispatch

FILE = "extra-llm-api-options.yaml"
TARGET = TRTLLM
VERSION = "TensorRT-LLM llm_args.py @ 0004396 (export/reference/README.md)"
SECTION = "speculative_config"
# decoding_type -> the pinned class that parses it (each class's Literal default in llm_args.py)
CLASSES = {
    "NGram": "NGramDecodingConfig",
    "SA": "SADecodingConfig",
    "Draft_Target": "DraftTargetDecodingConfig",
    "Eagle3": "Eagle3DecodingConfig",
}
SA_MATCH_CAP = 64  # SADecodingConfig: suffix matching is capped at 64 tokens per request with the global pool

Spec = dict[str, Any]


def _row(setting: str, fit: str, reason: str) -> Mapping:
    return Mapping(setting, TARGET, fit, reason)


def _ngram(engine: EngineConfig, o: NgramOptions) -> tuple[Spec, list[Mapping]]:
    spec = {
        "decoding_type": "NGram",
        "max_draft_len": draft_length(engine),
        "max_matching_ngram_size": o.max_match,
        "is_keep_all": True,  # keep every pattern-match pair, so the newest occurrence is there to copy
        "is_use_oldest": False,  # spectune copies the most recent earlier occurrence
        "is_public_pool": False,  # spectune looks up only the request's own tokens
    }
    rows = [
        _row(
            "drafter=ngram",
            APPROXIMATE,
            "decoding_type NGram with a private pool per request (is_public_pool false) and the newest match "
            "(is_use_oldest false), as spectune's lookup in the request's own tokens; how the pool is filled and "
            "matched follows TensorRT-LLM's own drafter",
        ),
        _row(
            f"ngram.max_match={o.max_match}",
            APPROXIMATE,
            "max_matching_ngram_size: the longest pattern searched; whether shorter ones are tried when it misses "
            "is TensorRT-LLM's drafter's choice",
        ),
        _row(f"ngram.min_match={o.min_match}", NONE, "no key for a shortest match"),
        _row(f"ngram.max_candidates={o.max_candidates}", NONE, "no key bounds the occurrences examined"),
        *gamma_rows(engine, TARGET, "max_draft_len"),
    ]
    return spec, rows


def _suffix(engine: EngineConfig, o: SuffixOptions) -> tuple[Spec, list[Mapping]]:
    shared = o.scope == "engine"
    spec = {
        "decoding_type": "SA",
        "max_draft_len": draft_length(engine),
        "max_matching_ngram_size": -1,  # -1: the longest match the suffix automaton finds
        "enable_global_pool": shared,
    }
    if shared:
        scope = _row(
            "suffix.scope=engine",
            APPROXIMATE,
            "enable_global_pool: each request also searches the other requests' automata, and finished requests "
            "stay in the pool until it is full (then the oldest goes); spectune keeps every finished generation "
            f"until the index is reset; matches there are capped at {SA_MATCH_CAP} tokens",
        )
    else:
        scope = _row("suffix.scope=session", EXACT, "enable_global_pool false: each request matches its own tokens")
    rows = [
        _row(
            "drafter=suffix",
            APPROXIMATE,
            "decoding_type SA: a suffix automaton drafts the continuation of the longest suffix match; spectune's "
            "suffix lookup also scores continuations by frequency",
        ),
        scope,
        _row(
            f"suffix.min_match={o.min_match}, max_match={o.max_match}",
            APPROXIMATE,
            "max_matching_ngram_size -1: the longest match, with no shortest or longest bound",
        ),
        _row(
            f"suffix.match_factor={o.match_factor}, min_token_prob={o.min_token_prob}",
            NONE,
            "no key caps a draft by match length or by a frequency threshold",
        ),
        _row(f"suffix.max_candidates={o.max_candidates}", NONE, "no key"),
        *gamma_rows(engine, TARGET, "max_draft_len"),
    ]
    return spec, rows


def _model_draft_rows(engine: EngineConfig, drafter: str) -> list[Mapping]:
    """What a drafting model does differently here: no early stop, greedy drafts."""
    return model_draft_rows(
        engine,
        TARGET,
        drafter,
        "max_draft_len tokens",
        "whatever the sampling (DecodingBaseConfig's _allow_greedy_draft_tokens)",
    )


def _draft_model(
    engine: EngineConfig, draft: str | None, other_tokenizer: str | None = None
) -> tuple[Spec, list[Mapping]]:
    """Draft_Target on the draft folder; speculation off where the draft's tokenizer differs (`other_tokenizer`)."""
    if other_tokenizer is not None:
        why = (
            "DraftTargetDecodingConfig has no key for a draft with another vocabulary (the pinned class's fields: "
            f"export/reference/) and the draft's ids would be read as the target's: speculation off ({other_tokenizer})"
        )
        return {}, [_row("drafter=draft_model (another tokenizer)", NONE, why)]
    spec = {"decoding_type": "Draft_Target", "max_draft_len": draft_length(engine), "speculative_model": draft}
    rows = [
        _row("drafter=draft_model", EXACT, "decoding_type Draft_Target with speculative_model = the draft weights"),
        *gamma_rows(engine, TARGET, "max_draft_len"),
        *_model_draft_rows(engine, "a draft model"),
    ]
    return spec, rows


def _eagle3(engine: EngineConfig, folder: str | None) -> tuple[Spec, list[Mapping]]:
    """decoding_type Eagle3 on the head folder, its layer ids written in TensorRT-LLM's count (module docstring)."""
    spec: Spec = {"decoding_type": "Eagle3", "max_draft_len": draft_length(engine), "speculative_model": folder}
    head = read_eagle3_head(folder)
    if head is None:
        layers = _row(
            "eagle3 layer ids",
            APPROXIMATE,
            f"the head's config.json at {folder} was not readable here: eagle3_layers_to_capture is not written, so "
            "TensorRT-LLM captures its default {1, n // 2 - 1, n - 4}; write the head's ids - 1 there",
        )
    elif min(head.layer_ids) < 1:
        return {}, [
            _row(
                "drafter=eagle3",
                NONE,
                f"the head reads layer id 0 (the embeddings) among {head.layer_ids}; TensorRT-LLM captures decoder "
                "layer outputs only, so it is exported with speculation off",
            )
        ]
    else:
        spec["eagle3_layers_to_capture"] = [i - 1 for i in head.layer_ids]
        layers = _row(
            f"eagle3 layer ids {head.layer_ids}",
            APPROXIMATE,
            f"eagle3_layers_to_capture = ids - 1 = {spec['eagle3_layers_to_capture']}: TensorRT-LLM's id L read as "
            "the output of decoder layer L, inferred from its default set (module docstring), not verified on a "
            "server",
        )
    rows = [
        _row("drafter=eagle3", EXACT, "decoding_type Eagle3 with speculative_model = the head folder; one chain"),
        layers,
        *gamma_rows(engine, TARGET, "max_draft_len"),
        *_model_draft_rows(engine, "an EAGLE-3 head"),
    ]
    return spec, rows


def _none(engine: EngineConfig, options: object, files: Files) -> tuple[Spec, list[Mapping]]:
    return {}, [_row("drafter=none", EXACT, f"speculation off: {FILE} has no {SECTION}")]


# The builder of each drafter TensorRT-LLM runs (export/table.py's TensorRT-LLM column).
BUILDERS: dict[str, Builder] = {
    "none": _none,
    "ngram": lambda engine, options, files: _ngram(engine, options),
    "suffix": lambda engine, options, files: _suffix(engine, options),
    "draft_model": lambda engine, options, files: _draft_model(engine, files.draft),
    "eagle3": lambda engine, options, files: _eagle3(engine, files.eagle3),
}


def _rule_rows(engine: EngineConfig, rule: AcceptanceRule) -> list[Mapping]:
    """The acceptance rule's and the sampling's rows."""
    if rule.lossy:
        acceptance = _row(
            f"acceptance={engine.acceptance}",
            NONE,
            "TensorRT-LLM verifies losslessly (exact match, or rejection sampling with use_rejection_sampling): no "
            "lossy rule, so acceptance and speedup there are lower than measured with this rule",
        )
    elif engine.temperature > 0:
        acceptance = _row(
            "acceptance=exact",
            APPROXIMATE,
            "non-greedy batches are verified by exact match with the target's sample (lossless; acceptance can be "
            "lower than spectune's rejection sampling); use_rejection_sampling (prototype, one-model paths) is "
            "not written",
        )
    else:
        acceptance = _row("acceptance=exact", EXACT, "greedy: a draft token is accepted when it is the target's argmax")
    sampling = _row(
        f"sampling (temperature={engine.temperature}, top_k={engine.top_k}, top_p={engine.top_p})",
        EXACT,
        "per request: send the same temperature / top_k / top_p to trtllm-serve's OpenAI API",
    )
    return [acceptance, sampling]


def _server_rows(record: ExportRecord) -> list[Mapping]:
    rows = [_row(f"model={record.model_name}", EXACT, "trtllm-serve the same target weights (Hugging Face folder)")]
    if record.context > 0:
        rows.append(_row(f"context={record.context}", EXACT, "trtllm-serve --max_seq_len (on the command)"))
    sessions = "one session at a time" if record.concurrency == 1 else f"concurrency={record.concurrency}"
    rows.append(
        _row(
            sessions,
            EXACT,
            f"trtllm-serve --max_batch_size {record.concurrency}: as many requests at once as spectune measured",
        )
    )
    return rows


def build(record: ExportRecord) -> tuple[dict[str, Any], list[Mapping]]:
    """The YAML's content ({} = speculation off) and the Mapping rows for TensorRT-LLM."""
    _, rule = typed_options(record.engine)
    files = Files(draft=record.draft, eagle3=record.eagle3)
    other = other_tokenizer_reason(record)
    builders = {**BUILDERS, "draft_model": lambda engine, options, f: _draft_model(engine, f.draft, other)}
    spec, rows = dispatch(record.engine, TARGET, builders, files, {})
    options = {SECTION: spec} if spec else {}
    return options, [*_server_rows(record), *rows, *_rule_rows(record.engine, rule)]


def command(record: ExportRecord) -> str:
    """The trtllm-serve command that reads the YAML."""
    context = f" --max_seq_len {record.context}" if record.context > 0 else ""
    return f"trtllm-serve {record.target}{context} --max_batch_size {record.concurrency} --extra_llm_api_options {FILE}"


def render(record: ExportRecord, options: dict[str, Any], rows: list[Mapping]) -> str:
    """The file text: comment lines (#), then the YAML."""
    lines = [f"# TensorRT-LLM LLM API options exported by spectune; keys: {VERSION}", f"# run: {command(record)}"]
    if not options:  # the drafter's row below says why
        lines.append(f"# no {SECTION}: TensorRT-LLM runs without speculation")
    lines += [f"# {r.fit}: {r.setting}: {r.reason}" for r in rows if r.fit != EXACT]
    return "\n".join(lines) + "\n" + yaml.safe_dump(options, sort_keys=False)


def write(out_dir: Path, record: ExportRecord) -> tuple[list[Path], list[Mapping]]:
    """Write extra-llm-api-options.yaml into out_dir; returns [its path] and the Mapping rows."""
    options, rows = build(record)
    path = out_dir / FILE
    write_atomic(path, render(record, options, rows))
    return [path], rows
