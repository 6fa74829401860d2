"""`README.md` of best/: what was measured, how to run each export and how each setting maps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.files import write_atomic
from export import llama_server, sglang, spectune_yaml, trtllm, vllm
from export.record import APPROXIMATE, EXACT, ExportRecord, Mapping, PerLevel, level_configuration, levels_in_order

FILE = "README.md"
FIT_WORDS = {EXACT: "exactly", APPROXIMATE: "approximately", "none": "not at all"}
# Measured with spectune's bundled model (models/spectune-tiny) in both engines: what carries over.
TRANSFERS = (
    "Acceptance transfers, speed does not. Acceptance of the same method on the same weights was measured equal "
    "in spectune's engine and llama-server (0.296 vs 0.296 for the draft model, n-gram 0.244 vs 0.243), but the "
    "cost of a forward pass differs about 5x between the two engines on the bundled model, so a speedup measured "
    "in one engine is not a speedup in another. Expect the acceptance numbers below on a server running the same "
    "weights; measure the speedup there."
)
TOKENS = (
    "N-gram sizes (min_match, max_match; llama.cpp's size-n / size-m / n-match; vLLM's prompt_lookup_*; SGLang's "
    "trie depth) are counted in tokens of the model's tokenizer. spectune measured them in that tokenizer, so they "
    "transfer to a server running the same weights and tokenizer. llama.cpp's default lookup sizes (size-n 12, "
    "size-m 48, ngram-mod n-match 24) suit word-level tokenizers, where 12 tokens are a short phrase; a tokenizer "
    "with longer tokens (the bundled one merges whole code lines, about 13 characters per token) needs sizes like "
    "the ones exported here, not those defaults."
)


def _num(value: Any, fmt: str = ".2f") -> str:
    return "n/a" if value is None else format(value, fmt)


def _interval(iv: Any) -> str:
    """'[lo, hi]' from tuner/confirm.py's {"low", "high", ...} or a [lo, hi] pair; why there is none otherwise."""
    if isinstance(iv, dict):
        lo, hi = iv.get("low"), iv.get("high")
        level = f"{iv['confidence']:.0%} " if iv.get("confidence") is not None else ""
        if lo is None or hi is None:
            return f"no interval ({iv.get('note') or 'not computed'})"
        return f"{level}interval [{lo:.2f}, {hi:.2f}]"
    if isinstance(iv, list | tuple) and len(iv) == 2 and None not in iv:
        return f"interval [{iv[0]:.2f}, {iv[1]:.2f}]"
    return "no interval"


def _ids(value: Any) -> str:
    """A count and the task ids of a list of ids / dicts with instance_id, or a bare count."""
    if value is None:
        return "n/a"
    if isinstance(value, int | float):
        return str(value)
    ids = [v.get("instance_id", str(v)) if isinstance(v, dict) else str(v) for v in value]
    return f"{len(ids)}" + (f" ({', '.join(ids)})" if ids else "")


def confirmed_lines(c: dict[str, Any]) -> list[str]:
    """The confirmation's figures as a markdown table (or why there are none)."""
    if not c or (c.get("speedup") is None and not c.get("speedup_repeats")):
        return ["Not confirmed: the tuner exported this configuration without a confirmation run."]
    sps = c.get("seconds_per_success") or {}
    repeats = ", ".join(_num(v) for v in (c.get("speedup_repeats") or [])) or "n/a"
    held_out = ", ".join(f"{k} {c[k]}" for k in ("split", "tasks", "repeats") if c.get(k) is not None)
    interval = c.get("speedup_interval")
    pooled = interval.get("pooled") if isinstance(interval, dict) else None
    rows = [
        ("speedup (median seconds per success over repeats, OFF / ON)", f"{_num(c.get('speedup'))}x"),
        (
            "speedup pooled over tasks (bootstrap over tasks)",
            f"{_num(pooled)}x, {_interval(c.get('speedup_interval'))}",
        ),
        ("speedup per repeat", repeats),
        ("seconds per success", f"baseline {_num(sps.get('baseline'))} s, candidate {_num(sps.get('candidate'))} s"),
        ("acceptance rate", _num(c.get("acceptance_rate"), ".3f")),
        ("mean accepted length", _num(c.get("mean_accepted_length"), ".2f")),
        ("regressions (tasks solved less often)", _ids(c.get("regressions"))),
        ("diverged tasks (output differs from OFF)", _ids(c.get("diverged_tasks"))),
        ("held-out set", held_out or "n/a"),
    ]
    lines = ["| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows]]
    if c.get("lossy"):
        lines.append(
            "\nThe acceptance rule is lossy: these numbers include output changes plain decoding would not make."
        )
    return lines


def _commands(record: ExportRecord, folder: Path) -> list[str]:
    config, _ = vllm.build(record)
    context = f" --max-model-len {record.context}" if record.context > 0 else ""
    spec = f' --speculative-config "$(cat {vllm.FILE})"' if config else ""
    return [
        f"- `{spectune_yaml.FILE}`: rerun the measurement in spectune:",
        f"  `{spectune_yaml.rerun_command(str(folder.resolve()))}`",
        f"- `{llama_server.FILE}` ({llama_server.BUILD}): `sh {llama_server.RUN_FILE}` starts the server with it",
        f"- `{vllm.FILE}` ({vllm.VERSION}): `vllm serve {record.target}{context} --max-num-seqs "
        f"{record.concurrency}{spec}`",
        f"- `{sglang.FILE}` ({sglang.VERSION}): `{sglang.command(record)}`",
        f"- `{trtllm.FILE}` ({trtllm.VERSION}): `{trtllm.command(record)}`",
    ]


def mapping_lines(rows: list[Mapping]) -> list[str]:
    """The Mapping rows as a markdown table."""
    lines = ["| setting | target | maps | reason |", "|---|---|---|---|"]
    for r in rows:
        reason = r.reason.replace("|", "\\|")
        lines.append(f"| {r.setting} | {r.target} | {FIT_WORDS[r.fit]} | {reason} |")
    return lines


def levels_lines(best: PerLevel, speedups: dict[int, Any] | None = None) -> list[str]:
    """The concurrency levels measured as a markdown table: agents at once, the best there, its speedup.

    `speedups[level]`: the paired speedup over OFF at that level, a number or a dict with speedup, low and high
    (a decision's `search` entry); a level without one shows "-".
    """
    lines = ["| agents at once | best configuration | speedup over OFF at that level |", "|---|---|---|"]
    for level in levels_in_order(best):
        s = (speedups or {}).get(level)
        s = s if isinstance(s, dict) else {"speedup": s}
        speedup = "-" if s.get("speedup") is None else f"{s['speedup']:.2f}x"
        if speedup != "-" and s.get("low") is not None and s.get("high") is not None:
            speedup += f" [{s['low']:.2f}, {s['high']:.2f}]"
        config = level_configuration(best[level]).replace("|", "\\|")
        lines.append(f"| {level} | {config} | {speedup} |")
    return lines


def cost_lines(ratios: dict[str, Any] | None, in_server: bool = False) -> list[str]:
    """The cost ratios R and C behind the speedup (`in_server`: measured in llama-server), and what they mean."""
    if not ratios:
        return ["spectune recorded no cost ratios for this configuration."]
    r, c = ratios.get("verify_over_step"), ratios.get("draft_over_verify")
    if in_server:
        return [
            "Cost ratios measured on llama-server (engine.backend=llama-server) for this configuration:",
            "",
            f"- R = one speculative step ÷ one plain step = {_num(r)} (llama-server reports drafting and verifying "
            "as one time, so drafting is inside R)",
            "",
            "These are the costs of the server these flags are for: the speedup above was measured there.",
        ]
    return [
        "Cost ratios measured in spectune's engine for this configuration:",
        "",
        f"- R = verify ÷ single step = {_num(r)} (one target forward over the draft vs one plain decoding step)",
        f"- C = draft ÷ verify = {_num(c)} (drafting time per step vs verifying it)",
        "",
        "The speedup follows from acceptance together with R and C; a server with other R and C gets another "
        "speedup from the same acceptance.",
    ]


def render(record: ExportRecord, rows: list[Mapping], folder: Path) -> str:
    """The README text."""
    e = record.engine
    where = "measured on CPU" if record.measured_on == "cpu" else f"measured on {record.measured_on.upper()}"
    if llama_server.measured_in_server(e):
        where += " in a real llama-server running exactly the flags of llama-server.args (engine.backend=llama-server)"
    draft = f", draft `{record.draft}`" if record.draft else ""
    options = ", ".join(f"{k}={v}" for k, v in sorted(e.options.items())) or "defaults"
    lines = [
        f"# Best configuration: {e.drafter}",
        "",
        f"Model `{record.model_name}` (target `{record.target}`{draft}), hardware profile `{record.hardware}`, "
        f"timings {where}.",
    ]
    if record.measured_on == "cpu":
        lines += [
            "",
            "**Measured on CPU**: CPU timings do not predict a GPU server's, because the relative cost of verifying "
            "several tokens at once differs between them (see What transfers). Re-measure on the serving hardware.",
        ]
    lines += [
        "",
        "## Configuration",
        "",
        f"drafter={e.drafter}, gamma={e.gamma}, gamma_policy={e.gamma_policy}, max_gamma={e.max_gamma}, "
        f"confidence={e.confidence}, acceptance={e.acceptance}, options: {options}; sampling temperature="
        f"{e.temperature}, top_k={e.top_k}, top_p={e.top_p}; context {record.context or 'n/a'} tokens.",
        "",
        "## Confirmed numbers",
        "",
        *confirmed_lines(record.confirmed or {}),
        "",
        "## Files",
        "",
        *_commands(record, folder),
        "",
        "## How each setting maps",
        "",
        *mapping_lines(rows),
        "",
        "## What transfers",
        "",
        TRANSFERS,
        "",
        *cost_lines(record.cost_ratios, llama_server.measured_in_server(record.engine)),
        "",
        TOKENS,
    ]
    return "\n".join(lines) + "\n"


def write(out_dir: Path, record: ExportRecord, rows: list[Mapping]) -> Path:
    """Write README.md into out_dir."""
    path = out_dir / FILE
    write_atomic(path, render(record, rows, out_dir))
    return path
