"""`sglang.args`: the configuration as SGLang 0.5.23 speculative server flags, one flag per line.

Every flag is a speculative argument of the pinned key set (export/reference/); semantics from the
help texts there: --speculative-algorithm builtins EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK,
UNO; --speculative-num-draft-tokens is the verify window, draft tokens + 1 (as the DSPARK help states it);
--speculative-accept-threshold-single accepts a draft token whose target probability exceeds it. From
SGLang's documentation: NGRAM builds a trie over prompts and outputs of all requests (capacity
--speculative-ngram-capacity), BFS expands by recency and PROB by frequency, max-trie-depth bounds the suffix
stored and matched, BFS breadth 1 keeps one chain; NGRAM runs on CUDA only; STANDALONE drafts with a separate
small model. Server arguments that are not speculative (--model-path, --context-length,
--max-running-requests) go on the command line in the header comment, not in the flag lines.

EAGLE-3 (`eagle3`): --speculative-algorithm EAGLE3 with one chain (eagle-topk 1, num-draft-tokens = steps + 1).
SGLang 0.5.23 reads the layers to capture only from the draft config's nested
`eagle_config.eagle_aux_hidden_state_layer_ids` (srt/model_executor/model_runner_components/
spec_aux_hidden_state.py `_resolve_eagle_aux_hidden_state`; without it, silently the default [2, n // 2, n - 3])
and captures id k as the input of decoder layer k + 1 ("we plus 1 here": srt/models/llama.py
`set_eagle3_layers_to_capture`, then `LlamaModel.forward` hands layers_to_capture to that layer's entry). So
its id is spectune's (and llama.cpp's / vLLM's) id - 1, and the last layer's output (spectune id n_layers) is
out of its reach (layer n never runs). `write` therefore puts a copy of the head's config.json with
`eagle_config` = {ids - 1, use_aux_hidden_state} into `sglang-eagle3/` of the export folder, beside a link to the
head's model.safetensors, and the flags point there. d2t offsets load as hot_token_id (srt/models/llama_eagle3.py).
Its llama_eagle3 always adds the fc output g as the layer's residual: a head trained with norm_before_residual
(residual hidden_norm(g), what training.eagle3 writes by default; vLLM and llama.cpp read the key) is off there.

Concurrency (`build_levels`): no flag of the pinned set sets a draft length per batch size. The nearest,
--speculative-adaptive, "dynamically adjusts num_steps based on acceptance rate" (not on load), tuned by the
JSON file of --speculative-adaptive-config; neither carries a table measured per level. So a concurrency
study exports the best of one level (by default the highest measured) with --max-running-requests set to it.
"""

from __future__ import annotations

from pathlib import Path

from common.files import write_atomic
from engine.acceptance import AcceptanceRule
from engine.drafters.ngram import NgramOptions
from engine.drafters.suffix import SuffixOptions
from engine.engine import EngineConfig
from export.files import dumps_strict
from export.record import (
    APPROXIMATE,
    EXACT,
    NONE,
    Eagle3Head,
    ExportRecord,
    Mapping,
    PerLevel,
    at_level,
    draft_length,
    gamma_rows,
    level_configuration,
    levels_in_order,
    other_tokenizer_reason,
    read_eagle3_head,
    speculation_on,
    typed_options,
)
from export.table import SGLANG, Builder, Files, dispatch

FILE = "sglang.args"
TARGET = SGLANG
VERSION = "SGLang 0.5.23"
Flag = tuple[str, str | None]
HEAD_DIR = "sglang-eagle3"  # the EAGLE-3 head with SGLang's layer ids, in the export folder (module docstring)


def _row(setting: str, fit: str, reason: str) -> Mapping:
    return Mapping(setting, TARGET, fit, reason)


def _ngram_trie(engine: EngineConfig, o: NgramOptions | SuffixOptions, match_type: str) -> list[Flag]:
    length = draft_length(engine)
    return [
        ("--speculative-algorithm", "NGRAM"),
        ("--speculative-num-draft-tokens", str(length + 1)),
        ("--speculative-ngram-min-bfs-breadth", "1"),
        ("--speculative-ngram-max-bfs-breadth", "1"),  # one chain per step, as spectune drafts
        ("--speculative-ngram-match-type", match_type),
        ("--speculative-ngram-max-trie-depth", str(o.max_match + length)),  # match + draft
    ]


def _ngram(engine: EngineConfig, o: NgramOptions) -> tuple[list[Flag], list[Mapping]]:
    rows = [
        _row(
            "drafter=ngram",
            APPROXIMATE,
            "NGRAM with match type BFS (recency): SGLang's trie also learns from other requests, spectune's "
            "lookup reads only the request's own tokens; CUDA only",
        ),
        _row(
            f"ngram.min_match={o.min_match}, max_match={o.max_match}",
            APPROXIMATE,
            f"no minimum-match flag; --speculative-ngram-max-trie-depth = max_match + draft length = "
            f"{o.max_match + draft_length(engine)}",
        ),
        _row(f"ngram.max_candidates={o.max_candidates}", NONE, "no flag"),
        *gamma_rows(engine, TARGET, "--speculative-num-draft-tokens (the verify window: last token and draft)", 1),
    ]
    return _ngram_trie(engine, o, "BFS"), rows


def _suffix(engine: EngineConfig, o: SuffixOptions) -> tuple[list[Flag], list[Mapping]]:
    scope = (
        _row("suffix.scope=engine", EXACT, "SGLang's n-gram trie is shared by all requests, like the engine-wide index")
        if o.scope == "engine"
        else _row(
            "suffix.scope=session",
            APPROXIMATE,
            "no flag keeps the trie to one request: SGLang also drafts from other requests' tokens",
        )
    )
    rows = [
        _row(
            "drafter=suffix",
            APPROXIMATE,
            "NGRAM with match type PROB (frequency-based expansion), the closest to spectune's frequency-scored "
            "suffix lookup; CUDA only",
        ),
        scope,
        _row(
            f"suffix.min_match={o.min_match}, max_match={o.max_match}",
            APPROXIMATE,
            f"no minimum-match flag; --speculative-ngram-max-trie-depth = max_match + draft length = "
            f"{o.max_match + draft_length(engine)}",
        ),
        _row(
            f"suffix.match_factor={o.match_factor}, min_token_prob={o.min_token_prob}",
            NONE,
            "no flag caps a draft by match length or by a frequency threshold",
        ),
        _row(f"suffix.max_candidates={o.max_candidates}", NONE, "no flag"),
        *gamma_rows(engine, TARGET, "--speculative-num-draft-tokens (the verify window: last token and draft)", 1),
    ]
    return _ngram_trie(engine, o, "PROB"), rows


def _draft_model(
    engine: EngineConfig, draft: str | None, other_tokenizer: str | None = None
) -> tuple[list[Flag], list[Mapping]]:
    """STANDALONE with the draft folder; speculation off where the draft's tokenizer differs (`other_tokenizer`)."""
    if other_tokenizer is not None:
        return [], [
            _row(
                "drafter=draft_model (another tokenizer)",
                NONE,
                "SGLang 0.5.23's STANDALONE draft must share the target's vocabulary and its built-in algorithms have "
                f"no cross-tokenizer one: speculation off ({other_tokenizer})",
            )
        ]
    length = draft_length(engine)
    flags = [
        ("--speculative-algorithm", "STANDALONE"),
        ("--speculative-draft-model-path", draft),
        ("--speculative-num-steps", str(length)),
        ("--speculative-eagle-topk", "1"),  # a chain, not a tree: spectune drafts one sequence
        ("--speculative-num-draft-tokens", str(length + 1)),
    ]
    rows = [
        _row(
            "drafter=draft_model",
            EXACT,
            "STANDALONE: a separate small draft model, one chain (eagle-topk 1); --speculative-adaptive (num_steps "
            "by acceptance rate) is never written: its support for STANDALONE is unverified",
        ),
        *gamma_rows(engine, TARGET, "--speculative-num-steps (and --speculative-num-draft-tokens = steps + 1)"),
    ]
    if engine.gamma_policy == "confidence":
        rows.append(
            _row(
                f"gamma_policy=confidence (confidence={engine.confidence})",
                NONE,
                "no flag stops a STANDALONE draft early on low confidence",
            )
        )
    return flags, rows


def sglang_layer_ids(layer_ids: list[int]) -> list[int]:
    """SGLang's eagle_aux_hidden_state_layer_ids for spectune's: it captures the input of layer id + 1."""
    return [i - 1 for i in layer_ids]


def _eagle3(engine: EngineConfig, folder: str | None, head_dir: str) -> tuple[list[Flag], list[Mapping]]:
    head = read_eagle3_head(folder)
    length = draft_length(engine)
    if head is not None and head.target_layers is not None and max(head.layer_ids) >= head.target_layers:
        return [], [
            _row(
                "drafter=eagle3",
                NONE,
                f"the head reads target layer id {max(head.layer_ids)}, the last layer's output: SGLang captures "
                f"the input of layer id + 1 and the target has {head.target_layers} layers, so it never captures "
                "it; exported with speculation off",
            )
        ]
    if head is not None and head.norm_before_residual:
        return [], [
            _row(
                "drafter=eagle3",
                NONE,
                "the head adds hidden_norm(g) as its layer's residual (norm_before_residual); SGLang 0.5.23's "
                "llama_eagle3 always adds g and reads no such key, so it would draft from other maths; exported "
                "with speculation off (train with --no-norm-before-residual for a head SGLang runs)",
            )
        ]
    flags = [
        ("--speculative-algorithm", "EAGLE3"),
        ("--speculative-draft-model-path", head_dir),
        ("--speculative-num-steps", str(length)),
        ("--speculative-eagle-topk", "1"),  # a chain, not a tree: spectune drafts one sequence
        ("--speculative-num-draft-tokens", str(length + 1)),
    ]
    if head is None:
        ids = _row(
            "eagle3 layer ids",
            APPROXIMATE,
            f"{folder}/config.json could not be read here, so {HEAD_DIR}/ is not written: give SGLang a copy of the "
            "head's config.json with eagle_config.eagle_aux_hidden_state_layer_ids = each of its ids - 1 beside its "
            "model.safetensors (SGLang captures the input of layer id + 1 and reads only the nested key)",
        )
    else:
        ids = _row(
            f"eagle3 layer ids {head.layer_ids}",
            EXACT,
            f"{HEAD_DIR}/ holds the head's config.json with eagle_config.eagle_aux_hidden_state_layer_ids = "
            f"{sglang_layer_ids(head.layer_ids)} (SGLang captures the input of layer id + 1) and a link to its "
            "model.safetensors",
        )
    rows = [
        _row(
            "drafter=eagle3",
            EXACT,
            "EAGLE3 with the head (d2t as hot_token_id, the target's embedding), one chain (eagle-topk 1)",
        ),
        ids,
        *gamma_rows(engine, TARGET, "--speculative-num-steps (and --speculative-num-draft-tokens = steps + 1)"),
    ]
    if engine.gamma_policy == "confidence":
        rows.append(
            _row(
                f"gamma_policy=confidence (confidence={engine.confidence})",
                NONE,
                "no flag stops an EAGLE3 draft early on low confidence: SGLang drafts --speculative-num-steps",
            )
        )
    if engine.temperature > 0:
        rows.append(
            _row(
                f"temperature={engine.temperature} with an EAGLE-3 head",
                APPROXIMATE,
                "with eagle-topk 1 SGLang drafts the head's top token; spectune samples the draft: both lossless, "
                "acceptance can differ",
            )
        )
    return flags, rows


def write_head_copy(out: Path, head: Eagle3Head) -> Path:
    """`out`/config.json: the head's config with SGLang's eagle_config ids; `out`/model.safetensors: a link to its."""
    own = head.config.get("eagle_config") or {}
    ids = sglang_layer_ids(head.layer_ids)
    config = {
        **head.config,
        "eagle_config": {**own, "eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True},
    }
    write_atomic(out / "config.json", dumps_strict(config))
    link = out / "model.safetensors"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to((head.path / "model.safetensors").resolve())
    return out


def _acceptance(engine: EngineConfig, rule: AcceptanceRule, lossy: bool) -> tuple[list[Flag], list[Mapping]]:
    if not lossy:
        return [], [_row("acceptance=exact", EXACT, "SGLang's default verification is lossless")]
    setting = f"acceptance={engine.acceptance}"
    if engine.acceptance == "threshold" and engine.temperature > 0:
        tau = rule.options.tau
        row = _row(
            f"{setting} (tau={tau})",
            APPROXIMATE,
            "--speculative-accept-threshold-single accepts a draft token whose target probability exceeds tau "
            "(spectune: >= tau); SGLang applies it when sampling, scored on its own sampling distribution",
        )
        return [("--speculative-accept-threshold-single", str(tau))], [row]
    return [], [
        _row(
            setting,
            NONE,
            "no equivalent rule (greedy requests verify by argmax match): acceptance and speedup there are lower "
            "than measured with this rule",
        )
    ]


def _none(engine: EngineConfig, options: object, files: Files) -> tuple[list[Flag], list[Mapping]]:
    return [], [_row("drafter=none", EXACT, "speculation off: no --speculative-algorithm")]


# The builder of each drafter SGLang runs (export/table.py's SGLang column): engine, options, weights -> flags, rows.
BUILDERS: dict[str, Builder] = {
    "none": _none,
    "ngram": lambda engine, options, files: _ngram(engine, options),
    "suffix": lambda engine, options, files: _suffix(engine, options),
    "draft_model": lambda engine, options, files: _draft_model(engine, files.draft),
    "eagle3": lambda engine, options, files: _eagle3(engine, files.eagle3, HEAD_DIR),
}


def build(record: ExportRecord) -> tuple[list[Flag], list[Mapping]]:
    """The speculative flags (name, value) and the Mapping rows for SGLang (`record.concurrency` requests at once)."""
    return build_at(record, record.concurrency)


def build_at(record: ExportRecord, level: int, head_dir: str = HEAD_DIR) -> tuple[list[Flag], list[Mapping]]:
    """The speculative flags and Mapping rows for `level` requests at once running `record.engine`.

    `head_dir`: where the EAGLE-3 head with SGLang's layer ids is (`write` puts it in the export folder).
    """
    if level < 1:
        raise ValueError(f"concurrency must be >= 1, got {level}")
    engine = record.engine
    _, rule = typed_options(engine)
    rows = [_row(f"model={record.model_name}", EXACT, "--model-path: the same target weights")]
    if record.context > 0:
        rows.append(_row(f"context={record.context}", EXACT, "server argument --context-length"))
    if level == 1:
        rows.append(_row("one session at a time", EXACT, "server argument --max-running-requests 1"))
    else:
        rows.append(_row(f"concurrency={level}", EXACT, f"server argument --max-running-requests {level}"))
    other = other_tokenizer_reason(record)
    builders = {
        **BUILDERS,
        "eagle3": lambda engine, options, files: _eagle3(engine, files.eagle3, head_dir),
        "draft_model": lambda engine, options, files: _draft_model(engine, files.draft, other),
    }
    flags, more = dispatch(engine, TARGET, builders, Files(draft=record.draft, eagle3=record.eagle3), [])
    rows += more
    if flags:
        more_flags, more = _acceptance(engine, rule, rule.lossy)
        flags += more_flags
    else:
        more = [
            _row(f"acceptance={engine.acceptance}", NONE if rule.lossy else EXACT, "no speculation, nothing to verify")
        ]
    rows += more
    rows.append(
        _row(
            f"sampling (temperature={engine.temperature}, top_k={engine.top_k}, top_p={engine.top_p})",
            EXACT,
            "per request: send the same temperature / top_p, and top_k -1 where spectune's is 0 (off)",
        )
    )
    return flags, rows


def build_levels(record: ExportRecord, best: PerLevel, level: int | None = None) -> tuple[list[Flag], list[Mapping]]:
    """SGLang for a concurrency study: the best of one measured level (default: the highest), at that load.

    SGLang 0.5.23 has no draft length per batch size (module docstring), so the other levels' best are not
    carried: a row says which level is exported and what was best elsewhere (exact when every level agrees).
    `record.context` is the context per request at that level; run it with command(record, level).
    """
    levels = levels_in_order(best)
    # The highest level is the load --max-running-requests sizes the server for; there a configuration that
    # only helps lighter loads (or speculation at all) costs every request's throughput, so its best goes.
    chosen = levels[-1] if level is None else level
    if chosen not in best:
        raise ValueError(f"level {chosen} was not measured (measured: {', '.join(map(str, levels))})")
    flags, rows = build_at(at_level(record, best[chosen]), chosen)
    measured = "; ".join(f"{n}: {level_configuration(best[n])}" for n in levels)
    exported = f"the best at {chosen} at once ({level_configuration(best[chosen])})"
    if all(_same(best[n], best[chosen]) for n in levels):
        row = _row(f"best per level: {measured}", EXACT, f"the same configuration was best at every level: {exported}")
    else:
        row = _row(
            f"best per level: {measured}",
            APPROXIMATE,
            f"exported {exported}; SGLang sets no draft length per batch size (--speculative-adaptive adjusts "
            "num_steps by acceptance rate, not by load; --speculative-adaptive-config holds that mode's tuning "
            "knobs), so the other levels' best are not carried: at those loads this server runs the exported one",
        )
    return flags, [*rows, row]


def _same(a: EngineConfig | None, b: EngineConfig | None) -> bool:
    """Two levels' best are the same configuration (None and drafter=none are both speculation off)."""
    return (a if speculation_on(a) else None) == (b if speculation_on(b) else None)


def command(record: ExportRecord, running: int | None = None) -> str:
    """The launch command that reads sglang.args (`running`: requests at once, default the record's concurrency)."""
    running = record.concurrency if running is None else running
    context = f" --context-length {record.context}" if record.context > 0 else ""
    return (
        f"python -m sglang.launch_server --model-path {record.target}{context} --max-running-requests {running} "
        f"$(grep -v '^#' {FILE})"
    )


def render(record: ExportRecord, flags: list[Flag], rows: list[Mapping]) -> str:
    """The file text: comment lines (#), then one flag per line."""
    lines = [
        f"# SGLang speculative flags exported by spectune; target: {VERSION}",
        f"# one flag per line, '#' lines are comments; run: {command(record)}",
    ]
    if not flags:
        lines.append("# no speculative flags: the exported configuration runs SGLang without speculation")
    lines += [f"# {r.fit}: {r.setting}: {r.reason}" for r in rows if r.fit != EXACT]
    lines += [name if value is None else f"{name} {value}" for name, value in flags]
    return "\n".join(lines) + "\n"


def write(out_dir: Path, record: ExportRecord) -> tuple[list[Path], list[Mapping]]:
    """Write sglang.args into out_dir (and the EAGLE-3 head's SGLang copy); returns [its path] and the Mapping rows."""
    folder = Path(out_dir).resolve() / HEAD_DIR
    flags, rows = build_at(record, record.concurrency, str(folder))
    head = read_eagle3_head(record.eagle3) if record.engine.drafter == "eagle3" and flags else None
    if head is not None:
        write_head_copy(folder, head)
    path = out_dir / FILE
    write_atomic(path, render(record, flags, rows))
    return [path], rows
