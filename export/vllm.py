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

EAGLE-3 (`eagle3`): method "eagle3" with `model` = the head folder as spectune wrote it. vLLM 0.33.0 reads
`eagle_aux_hidden_state_layer_ids` from the top level of the draft's config.json (a nested `eagle_config` only
as a fallback; v1/worker/gpu_model_runner.py `_get_eagle3_aux_layers_from_config`) and captures id L as the
residual stream entering target decoder layer L (models/interfaces.py `_maybe_add_hidden_state`, called by
models/llama.py with start_layer before the first layer and idx + 1 after layer idx): spectune's and llama.cpp's
convention, ids 0..n_layers all readable. The d2t offsets load as draft_id_to_target_id only where the draft
vocabulary is smaller than the target's (models/llama_eagle3.py); a full-vocabulary head with a d2t is refused.

Concurrency (`build_levels`): num_speculative_tokens_per_batch_size `[[lo, hi, k], ...]` drafts k tokens at
batch sizes lo..hi (k clamped to num_speculative_tokens, 0 = no drafting); as vLLM's dynamic-SD lookup
reads it (vllm/v1/spec_decode/dynamic/utils.py) the first range starts at 1, ranges are sorted and do not
overlap, and batch sizes past the last range keep its k. It changes the draft length only: one method and
one set of options serve every batch size.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from common.files import write_atomic
from engine.drafters.ngram import NgramOptions
from engine.drafters.suffix import SuffixOptions
from engine.engine import EngineConfig
from export.files import dumps_strict
from export.record import (
    APPROXIMATE,
    EXACT,
    NONE,
    ExportRecord,
    Mapping,
    PerLevel,
    draft_length,
    gamma_rows,
    level_configuration,
    levels_in_order,
    model_draft_rows,
    other_tokenizer_reason,
    read_eagle3_head,
    speculation_on,
    typed_options,
)
from export.table import VLLM, Builder, Files, dispatch

FILE = "vllm-speculative-config.json"
TARGET = VLLM
VERSION = "vLLM 0.33.0"
METHODS = ("ngram", "suffix", "draft_model", "eagle3")  # the SpeculativeMethod values this exporter writes
GLOBAL_TREE_REQUESTS = 10000  # vLLM's default suffix_decoding_max_cached_requests
PER_BATCH_SIZE = "num_speculative_tokens_per_batch_size"


def _row(setting: str, fit: str, reason: str) -> Mapping:
    return Mapping(setting, TARGET, fit, reason)


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


def _draft_model(
    engine: EngineConfig, draft: str | None, other_tokenizer: str | None = None
) -> tuple[dict[str, Any], list[Mapping]]:
    """method draft_model; with use_heterogeneous_vocab where the draft's tokenizer differs (`other_tokenizer`)."""
    config = {"method": "draft_model", "model": draft, "num_speculative_tokens": draft_length(engine)}
    row = _row("drafter=draft_model", EXACT, "method draft_model with model = the draft weights (same tokenizer)")
    if other_tokenizer is not None:
        config["use_heterogeneous_vocab"] = True
        row = _row(
            "drafter=draft_model (another tokenizer)",
            APPROXIMATE,
            "use_heterogeneous_vocab: vLLM restricts the draft to the tokens both vocabularies share (TLI, greedy "
            "drafts) where spectune carries its drafts over as text and re-tokenizes them; both verify losslessly, "
            f"acceptance can differ ({other_tokenizer})",
        )
    rows = [
        row,
        *gamma_rows(engine, TARGET, "num_speculative_tokens"),
        *_model_draft_rows(engine, "a draft model"),
    ]
    return config, rows


def _model_draft_rows(engine: EngineConfig, drafter: str) -> list[Mapping]:
    """What a drafting model does differently here: no early stop, greedy drafts."""
    return model_draft_rows(
        engine, TARGET, drafter, "num_speculative_tokens = gamma", "by default (draft_sample_method 'greedy')"
    )


def _eagle3(engine: EngineConfig, folder: str | None) -> tuple[dict[str, Any], list[Mapping]]:
    """method eagle3 on the head folder as it is: vLLM 0.33.0 reads its layer ids in spectune's convention."""
    head = read_eagle3_head(folder)
    if head is not None and head.has_d2t and head.draft_vocab_size == head.vocab_size:
        # models/llama_eagle3.py: draft_id_to_target_id exists only when draft_vocab_size != the target's, and
        # load_weights renames d2t to it, so AutoWeightsLoader raises "no module or parameter named ...".
        return {}, [
            _row(
                "drafter=eagle3",
                NONE,
                f"the head at {folder} has the full target vocabulary and a d2t tensor; vLLM 0.33.0 keeps "
                "draft_id_to_target_id only for a smaller draft vocabulary and refuses to load that d2t, so it is "
                "exported with speculation off (a full-vocabulary head saved without d2t/t2d loads)",
            )
        ]
    rows = [
        _row(
            "drafter=eagle3",
            EXACT,
            "method eagle3 with model = the head folder as spectune wrote it: vLLM reads its "
            "eagle_aux_hidden_state_layer_ids in spectune's convention, id L = the residual stream entering target "
            "decoder layer L (v1/worker/gpu_model_runner.py _get_eagle3_aux_layers_from_config; captured by "
            "models/interfaces.py _maybe_add_hidden_state after layer L - 1 in models/llama.py), d2t as "
            "offsets (draft_id_to_target_id), norm_before_residual from the config (models/llama_eagle3.py "
            "_residual_norm) and the target's embedding; one chain of drafts",
        ),
        *gamma_rows(engine, TARGET, "num_speculative_tokens"),
        *_model_draft_rows(engine, "an EAGLE-3 head"),
    ]
    return {"method": "eagle3", "model": folder, "num_speculative_tokens": draft_length(engine)}, rows


def build(record: ExportRecord) -> tuple[dict[str, Any], list[Mapping]]:
    """The speculative config dict and the Mapping rows for vLLM."""
    config, rows = _speculative(record.engine, record.draft, record.eagle3, other_tokenizer_reason(record))
    return config, [*_model_rows(record), _sessions_row(record.concurrency), *rows, *_rule_rows(record.engine)]


def _model_rows(record: ExportRecord) -> list[Mapping]:
    rows = [_row(f"model={record.model_name}", EXACT, "vllm serve the same target weights")]
    if record.context > 0:
        rows.append(_row(f"context={record.context}", EXACT, "server argument --max-model-len (not in this JSON)"))
    return rows


def _sessions_row(concurrency: int) -> Mapping:
    if concurrency == 1:
        return _row(
            "one session at a time", EXACT, "server argument --max-num-seqs 1 reproduces spectune's single agent"
        )
    return _row(
        f"concurrency={concurrency}",
        EXACT,
        f"server argument --max-num-seqs {concurrency}: as many sequences as spectune measured agents at once",
    )


def _speculative(
    engine: EngineConfig, draft: str | None, eagle3: str | None = None, other_tokenizer: str | None = None
) -> tuple[dict[str, Any], list[Mapping]]:
    """The speculative config of `engine` ({} = speculation off) and the drafter's rows (export/table.py).

    `other_tokenizer`: how the draft's tokenizer differs from the target's (record.other_tokenizer_reason).
    """
    builders = BUILDERS
    if other_tokenizer is not None:
        builders = {**BUILDERS, "draft_model": lambda e, options, files: _draft_model(e, files.draft, other_tokenizer)}
    return dispatch(engine, TARGET, builders, Files(draft=draft, eagle3=eagle3), {})


def _none(engine: EngineConfig, options: object, files: Files) -> tuple[dict[str, Any], list[Mapping]]:
    return {}, [_row("drafter=none", EXACT, "speculation off: start vLLM without --speculative-config")]


# The builder of each drafter vLLM runs (export/table.py's vLLM column): engine, options, weights -> config, rows.
BUILDERS: dict[str, Builder] = {
    "none": _none,
    "ngram": lambda engine, options, files: _ngram(engine, options),
    "suffix": lambda engine, options, files: _suffix(engine, options),
    "draft_model": lambda engine, options, files: _draft_model(engine, files.draft),
    "eagle3": lambda engine, options, files: _eagle3(engine, files.eagle3),
}


def _rule_rows(engine: EngineConfig) -> list[Mapping]:
    """The acceptance rule's and the sampling's rows."""
    _, rule = typed_options(engine)
    if rule.lossy:
        acceptance = _row(
            f"acceptance={engine.acceptance}",
            NONE,
            "vLLM 0.33.0 verifies losslessly (rejection_sample_method 'standard'): no lossy rule, so acceptance "
            "and speedup there are lower than measured with this rule",
        )
    else:
        acceptance = _row("acceptance=exact", EXACT, "rejection_sample_method 'standard' (vLLM's default) is lossless")
    sampling = _row(
        f"sampling (temperature={engine.temperature}, top_k={engine.top_k}, top_p={engine.top_p})",
        EXACT,
        "per request: send the same temperature / top_p, and top_k -1 where spectune's is 0 (off)",
    )
    return [acceptance, sampling]


def batch_size_ranges(lengths: dict[int, int], max_num_seqs: int | None = None) -> list[list[int]]:
    """`[[lo, hi, k], ...]` from the draft length k measured best at each level (0 = speculation off there).

    A level's k holds from that level up to just below the next measured one; the lowest level's k also
    covers the batch sizes below it (vLLM needs the first range to start at 1); the last range ends at
    `max_num_seqs` (default: the highest level), so the ranges cover 1..max_num_seqs without a gap.
    """
    levels = sorted(lengths)
    if not levels or levels[0] < 1:
        raise ValueError(f"levels must be whole numbers >= 1, got {levels}")
    end = _last_batch_size(levels, max_num_seqs)
    if any(lengths[level] < 0 for level in levels):
        raise ValueError(f"draft lengths must be >= 0, got {lengths}")
    starts = [1, *levels[1:]]
    ends = [nxt - 1 for nxt in levels[1:]] + [end]
    return [[lo, hi, lengths[level]] for lo, hi, level in zip(starts, ends, levels, strict=True)]


def _last_batch_size(levels: list[int], max_num_seqs: int | None) -> int:
    """Where the last range ends: `max_num_seqs`, which must reach the highest level, else that level."""
    if max_num_seqs is None:
        return levels[-1]
    if max_num_seqs < levels[-1]:
        raise ValueError(f"max_num_seqs={max_num_seqs} is below the highest measured level {levels[-1]}")
    return max_num_seqs


def _options_key(config: dict[str, Any]) -> dict[str, Any]:
    """A speculative config without what depends on the draft length (which the table varies per batch size)."""
    key = {k: v for k, v in config.items() if k != "num_speculative_tokens"}
    if "suffix_decoding_max_tree_depth" in key:  # written as max_match + draft length: compare max_match
        key["suffix_decoding_max_tree_depth"] -= config["num_speculative_tokens"]
    return key


def build_levels(
    record: ExportRecord, best: PerLevel, max_num_seqs: int | None = None
) -> tuple[dict[str, Any] | None, list[Mapping]]:
    """One speculative config for every measured level: the best level's method with a per-batch-size length.

    `best` maps each measured level (agents at once) to its best configuration, None where nothing beat
    OFF. Each level drafts its own draft length (0 where speculation is off there) through
    num_speculative_tokens_per_batch_size; num_speculative_tokens is the longest. vLLM varies only the
    length per batch size, so this needs every speculating level to export the same method and options:
    otherwise the config is None and the first row says why (export one level's `build` instead).
    `max_num_seqs` (default: the highest level) is the server's --max-num-seqs, where the last range ends.
    """
    levels = levels_in_order(best)
    end = _last_batch_size(levels, max_num_seqs)
    head = [*_model_rows(record), _row(f"concurrency {', '.join(map(str, levels))}", EXACT, f"--max-num-seqs {end}")]
    lengths: dict[int, int] = {}
    speculating: dict[int, tuple[dict[str, Any], list[Mapping]]] = {}
    for level in levels:
        config = best[level]
        if not speculation_on(config):
            lengths[level] = 0
            continue
        other = other_tokenizer_reason(replace(record, engine=config))
        spec, rows = _speculative(config, record.draft, record.eagle3, other)
        if not spec:
            why = next(r.reason for r in rows if r.fit == NONE)
            return None, [
                _row(PER_BATCH_SIZE, NONE, f"level {level}'s best, {config.drafter}, does not run here: {why}")
            ]
        lengths[level], speculating[level] = spec["num_speculative_tokens"], (spec, rows)
    table = batch_size_ranges(lengths, max_num_seqs)
    if not speculating:
        off = _row(
            PER_BATCH_SIZE, EXACT, "speculation off at every level measured: start vLLM without --speculative-config"
        )
        return {}, [*head, off, *_rule_rows(record.engine)]
    shapes = {level: _options_key(spec) for level, (spec, _) in speculating.items()}
    first = min(shapes)
    other = next((level for level in sorted(shapes) if shapes[level] != shapes[first]), None)
    if other is not None:
        reason = (
            f"level {first} runs {level_configuration(best[first])} and level {other} "
            f"{level_configuration(best[other])}: vLLM takes one method and one set of options for every batch "
            "size, varying only the draft length"
        )
        return None, [_row(PER_BATCH_SIZE, NONE, reason)]
    longest = max(speculating, key=lambda level: lengths[level])  # its config carries the longest length
    spec, rows = speculating[longest]
    config = {**spec, PER_BATCH_SIZE: table}
    # Every speculating level's acceptance rule, once each: a lossy one at any level is not reproduced here.
    rules = dict.fromkeys(row for level in sorted(speculating) for row in _rule_rows(best[level]))
    return config, [*head, _table_row(table, best, levels, spec), *rows, *rules]


def _table_row(table: list[list[int]], best: PerLevel, levels: list[int], spec: dict[str, Any]) -> Mapping:
    """How the measured levels carry over as batch-size ranges (approximately: what a batch size is differs)."""
    ranges = ", ".join(f"{lo}-{hi}: {k}" for lo, hi, k in table)
    reason = (
        f"draft length per batch size {ranges} (0: no drafting), from the best at each level; vLLM looks k up by "
        "the requests scheduled in a step, while a level counts agents in flight (an agent between turns is not "
        "in the batch), and batch sizes between measured levels keep the lower level's length"
    )
    if levels[0] > 1:
        reason += f"; batch sizes below {levels[0]} were not measured and take its length"
    if spec.get("method") == "suffix":
        reason += (
            "; method suffix: whether its proposer shortens drafts to the table's k is not verified in the pinned "
            "key set (it caps drafts at num_speculative_tokens): re-measure at each level"
        )
    setting = "best per level: " + "; ".join(f"{level}: {level_configuration(best[level])}" for level in levels)
    return _row(setting, APPROXIMATE, reason)


def write(out_dir: Path, record: ExportRecord) -> tuple[list[Path], list[Mapping]]:
    """Write vllm-speculative-config.json into out_dir; returns [its path] and the Mapping rows."""
    config, rows = build(record)
    path = out_dir / FILE
    write_atomic(path, dumps_strict(config))
    return [path], rows
