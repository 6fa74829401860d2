"""How each spectune drafter maps to each production server: one table, and the one dispatch the writers share.

`TABLE[drafter][server]` is either a `Way` (the server's own name for the drafter: a `--spec-type` kind, a vLLM
`method`, an SGLang `--speculative-algorithm`, a TensorRT-LLM `decoding_type`) or the reason the server has none, in
which case the drafter is exported there with speculation off. Each writer (export/llama_server.py, vllm.py,
sglang.py, trtllm.py) keeps only its builders, the functions that turn one drafter's options into that server's
flags (or config) and Mapping rows; `dispatch` picks the builder this table names, exports a combination (A+B)
through the lookup child the server runs, and writes the "no equivalent" row otherwise. docs/servers.md's mapping
rows are `python -m export` (tests/export/test_table.py keeps the two equal and every writer's builders equal to its
column).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.engine import EngineConfig
from export.record import APPROXIMATE, NONE, Mapping, half_export, typed_options

LLAMA, VLLM, SGLANG, TRTLLM = "llama-server", "vLLM", "SGLang", "TensorRT-LLM"
SERVERS = (LLAMA, VLLM, SGLANG, TRTLLM)
# What a Way's kind is given as on each server (docs/servers.md's column headers say it).
KIND_FLAG = {LLAMA: "--spec-type", VLLM: '"method"', SGLANG: "--speculative-algorithm", TRTLLM: "decoding_type"}


@dataclass(frozen=True)
class Way:
    """How one server runs one drafter."""

    kind: str  # the server's own name for it ("" = start the server with no speculative flags; "a, b": one of them)
    lookup: bool = False  # a lookup the server can run alone as a combination's lookup part
    note: str = ""  # which of several kinds, when the drafter's options choose


@dataclass(frozen=True)
class Files:
    """The weights a drafter's flags point at (None where the study had none)."""

    draft: str | None = None  # draft_model's weights
    eagle3: str | None = None  # the EAGLE-3 head: its HF folder, or its GGUF for llama-server
    dflash: str | None = None  # a DFlash / DSpark draft GGUF the user brought (server.dflash_gguf)


OFF = Way("")  # speculation off: nothing to pass

TABLE: dict[str, dict[str, Way | str]] = {
    "none": {LLAMA: Way("none"), VLLM: OFF, SGLANG: OFF, TRTLLM: OFF},
    "ngram": {
        LLAMA: Way("ngram-simple", lookup=True),
        VLLM: Way("ngram", lookup=True),
        SGLANG: Way("NGRAM", lookup=True),
        TRTLLM: Way("NGram", lookup=True),
    },
    "suffix": {
        LLAMA: Way("ngram-map-k4v, ngram-mod", lookup=True, note="scope session, scope engine"),
        VLLM: Way("suffix", lookup=True),
        SGLANG: Way("NGRAM", lookup=True),
        TRTLLM: Way("SA", lookup=True),  # suffix automaton: longest suffix match, no frequency scores
    },
    # llama.cpp's own lookups (engine/drafters/ngram_cache.py, ngram_map_k.py): the other servers have neither
    "ngram_cache": {
        LLAMA: Way("ngram-cache", lookup=True),
        VLLM: "llama.cpp's ngram-cache (frequency-thresholded 1..4-gram counts) has no vLLM method (its ngram is "
        "prompt lookup of the most recent match): exported with speculation off",
        SGLANG: "llama.cpp's ngram-cache (frequency-thresholded 1..4-gram counts) has no SGLang algorithm: "
        "exported with speculation off",
        TRTLLM: "llama.cpp's ngram-cache (frequency-thresholded 1..4-gram counts) has no TensorRT-LLM decoding_type "
        "(NGram keeps pattern-match pairs without counts, SA matches the longest suffix): exported with speculation "
        "off",
    },
    "ngram_map_k": {
        LLAMA: Way("ngram-map-k", lookup=True),
        VLLM: "llama.cpp's ngram-map-k (first-seen key positions, per-key draft lengths) has no vLLM method: "
        "exported with speculation off",
        SGLANG: "llama.cpp's ngram-map-k (first-seen key positions, per-key draft lengths) has no SGLang "
        "algorithm: exported with speculation off",
        TRTLLM: "llama.cpp's ngram-map-k (first-seen key positions, per-key draft lengths) has no TensorRT-LLM "
        "decoding_type: exported with speculation off",
    },
    "draft_model": {
        LLAMA: Way("draft-simple"),
        VLLM: Way("draft_model"),
        SGLANG: Way("STANDALONE"),
        TRTLLM: Way("Draft_Target"),
    },
    "mtp": {
        LLAMA: Way("draft-mtp"),
        VLLM: "method 'mtp' reads MTP layers from the target checkpoint itself (num_nextn_predict_layers: "
        "DeepSeek-V3, Qwen3-Next, MiMo); vLLM has no loader for a separately trained module on another target, "
        "so it is exported with speculation off",
        SGLANG: "NEXTN loads the target's own nextn layer and EAGLE/EAGLE3 an EAGLE head checkpoint; a spectune "
        "MTP module is neither, so it is exported with speculation off",
        TRTLLM: "decoding_type MTP runs the MTP layers of the target checkpoint (num_nextn_predict_layers, read from "
        "its config), or replacement heads of the same layout for a target model TensorRT-LLM implements with MTP "
        "(DeepSeek-V3 style); a spectune MTP module trained for another target is neither, so it is exported with "
        "speculation off",
    },
    "eagle3": {LLAMA: Way("draft-eagle3"), VLLM: Way("eagle3"), SGLANG: Way("EAGLE3"), TRTLLM: Way("Eagle3")},
    "layer_skip": {
        LLAMA: "no early-exit self-speculation in llama.cpp: exported with speculation off",
        VLLM: "no early-exit self-speculation method in SpeculativeMethod: exported with speculation off",
        SGLANG: "no early-exit self-speculation algorithm: exported with speculation off",
        TRTLLM: "no early-exit self-speculation decoding_type: exported with speculation off",
    },
    # llama-server only (engine/drafters/server_only.py): the draft is a llama.cpp GGUF the user brought
    "dflash": {
        LLAMA: Way("draft-dflash"),
        VLLM: "a DFlash draft given as a llama.cpp GGUF (server.dflash_gguf); vLLM loads Hugging Face drafts: "
        "exported with speculation off",
        SGLANG: "SGLang's DFLASH loads the draft's Hugging Face checkpoint, not the llama.cpp GGUF spectune was "
        "given (server.dflash_gguf): exported with speculation off",
        TRTLLM: "TensorRT-LLM's DFlash loads the draft's Hugging Face checkpoint (speculative_model), not the "
        "llama.cpp GGUF spectune was given (server.dflash_gguf): exported with speculation off",
    },
    "dspark": {
        LLAMA: Way("draft-dspark"),
        VLLM: "a DSpark draft given as a llama.cpp GGUF (server.dflash_gguf); vLLM loads Hugging Face drafts: "
        "exported with speculation off",
        SGLANG: "SGLang's DSPARK loads the draft's Hugging Face checkpoint, not the llama.cpp GGUF spectune was "
        "given (server.dflash_gguf): exported with speculation off",
        TRTLLM: "TensorRT-LLM's DSpark loads the draft's Hugging Face checkpoint (speculative_model), not the "
        "llama.cpp GGUF spectune was given (server.dflash_gguf): exported with speculation off",
    },
}


def way(drafter: str, server: str) -> Way | None:
    """How `server` runs `drafter` alone, None where it has no equivalent (combinations are never in the table)."""
    found = TABLE.get(drafter, {}).get(server)
    return found if isinstance(found, Way) else None


def no_equivalent(drafter: str, server: str) -> str:
    """Why `drafter` runs with speculation off on `server` (a generic line for drafters without a specific one)."""
    found = TABLE.get(drafter, {}).get(server)
    return found if isinstance(found, str) else f"no {server} equivalent: exported with speculation off"


def mapped(server: str) -> tuple[str, ...]:
    """The drafters `server` runs alone, in table order: exactly the builders its writer must have."""
    return tuple(d for d in TABLE if way(d, server) is not None)


def lookups(server: str) -> tuple[str, ...]:
    """The lookups `server` can run as a combination's lookup part, in the order a combination's child is sought."""
    return tuple(d for d in TABLE if (w := way(d, server)) is not None and w.lookup)


def lookup_child(engine: EngineConfig, options: Any, server: str) -> tuple[str, Any] | None:
    """For a combined drafter (A+B), its first child among `server`'s lookups and that child's options, else None."""
    children = getattr(options, "children", None) or {}
    return next(((name, children[name]) for name in lookups(server) if name in children), None)


Spec = Any  # a writer's speculative part: llama-server / SGLang flag lists, vLLM's / TensorRT-LLM's config dict
Builder = Callable[[EngineConfig, Any, Files], tuple[Spec, list[Mapping]]]
WhyLeftOut = Callable[[str, Any], str]  # (another child of a combination, the combination's options) -> why


def combined_row(drafter: str, child: str, server: str, options: Any, why: WhyLeftOut | None = None) -> Mapping:
    """A combination exported as its lookup child alone, saying why each other child is left out."""
    others = [p for p in drafter.split("+") if p != child]
    say = why or (lambda other, _: f"{other}: {no_equivalent(other, server)}")
    reason = half_export(child, "; ".join(say(other, options) for other in others))
    return Mapping(f"drafter={drafter}", server, APPROXIMATE, reason)


def dispatch(
    engine: EngineConfig,
    server: str,
    builders: dict[str, Builder],
    files: Files,
    off: Spec,
    *,
    why_left_out: WhyLeftOut | None = None,
    whole: Callable[[EngineConfig, tuple[str, Any], Any, Files], tuple[Spec, list[Mapping]] | None] | None = None,
) -> tuple[Spec, list[Mapping]]:
    """`engine`'s speculative part on `server` and its rows: the table's builder, a combination's lookup part
    (or `whole`, where the server runs the whole combination), else `off` with the "no equivalent" row."""
    options, _ = typed_options(engine)
    if way(engine.drafter, server) is not None:
        return builders[engine.drafter](engine, options, files)
    if (child := lookup_child(engine, options, server)) is not None:
        if whole is not None and (both := whole(engine, child, options, files)) is not None:
            return both
        spec, rows = builders[child[0]](engine, child[1], files)
        return spec, [combined_row(engine.drafter, child[0], server, options, why_left_out), *rows]
    return off, [Mapping(f"drafter={engine.drafter}", server, NONE, no_equivalent(engine.drafter, server))]


def markdown() -> str:
    """The table as docs/servers.md's Markdown: one row per drafter, one column per server."""
    head = " | ".join(f"{s} ({KIND_FLAG[s]})" for s in SERVERS)
    lines = [f"| drafter | {head} |", "|---" * (len(SERVERS) + 1) + "|"]
    for drafter in TABLE:
        cells = []
        for server in SERVERS:
            w = way(drafter, server)
            if w is None:
                cells.append("off")  # the reason is the export README's row for it
            else:
                names = ", ".join(f"`{kind}`" for kind in w.kind.split(", "))
                cells.append(names + (f" ({w.note})" if w.note else "") if w.kind else "off (no flags)")
        lines.append(f"| `{drafter}` | " + " | ".join(cells) + " |")
    lines.append(
        "| `A+B` | its lookup part alone, or with `policy=first` and a model part that has a kind, both "
        "kinds as one first-wins list | its lookup part alone | its lookup part alone | its lookup part alone |"
    )
    return "\n".join(lines)
