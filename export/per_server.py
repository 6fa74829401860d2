"""best/ as the tuner writes it: one folder per target (the engine's own best and each server's), and an index.

    best/README.md          the table: target, configuration, search speedup, confirmed speedup, how it maps
    best/spectune/          spectune.yaml (reruns the measurement) and README.md
    best/llama-server/      llama-server.args, spectune.yaml of the configuration behind it, README.md
    best/vllm/              vllm-speculative-config.json, ...
    best/sglang/            sglang.args, ...
    best/trtllm/            extra-llm-api-options.yaml (TensorRT-LLM), ...

A server's file holds speculation ON only when the tuner decided so (`decision["on"]`); otherwise it is that
server without speculation (llama-server `--spec-type none`, no vLLM speculative config, no SGLang
speculative flags, no TensorRT-LLM speculative_config), and its README says what was measured and why. A decision
is a plain dict (the tuner's `Decision.to_dict()`): target, trial, on, reason, fit, fit_reason, search {speedup,
low, high}, confirmed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.files import write_atomic
from engine.engine import EngineConfig
from export import llama_server, readme, spectune_yaml
from export.fit import FOLDERS, SERVERS
from export.record import ExportRecord, Mapping, off_record

INDEX = "README.md"
SPECTUNE = "spectune"


def off(record: ExportRecord) -> ExportRecord:
    """The same export with speculation off (sampling and seed kept)."""
    return off_record(record)


def folder_name(target: str) -> str:
    """best/<folder> of a target."""
    return SPECTUNE if target == SPECTUNE else FOLDERS[target]


def _x(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _span(low: Any, high: Any) -> str:
    return "" if low is None or high is None else f" [{low:.2f}, {high:.2f}]"


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def configuration(engine: dict[str, Any] | None) -> str:
    """A configuration in one short line: drafter, gamma and its options."""
    if not engine:
        return "-"
    options = " ".join(f"{k}={_short(v)}" for k, v in sorted((engine.get("options") or {}).items()))
    policy = "" if engine.get("gamma_policy", "fixed") == "fixed" else f" {engine['gamma_policy']}"
    return f"{engine['drafter']} gamma={engine['gamma']}{policy}" + (f" {options}" if options else "")


def _decision_lines(target: str, decision: dict[str, Any], engine: dict[str, Any] | None) -> list[str]:
    verdict = "speculation ON" if decision["on"] else "speculation OFF"
    lines = [f"# {target}: {verdict}", ""]
    if decision["on"]:
        lines.append(f"Run {configuration(engine)}: {decision['reason']}.")
    elif decision.get("trial") is None:
        lines.append(f"Run without speculation: {decision['reason']}.")
    else:
        lines.append(
            f"Run without speculation. The best configuration {target} can run was {configuration(engine)} "
            f"(trial {decision['trial']}), but {decision['reason']}."
        )
    if decision.get("fit"):
        lines += ["", f"How it maps: {decision['fit']} ({decision.get('fit_reason') or 'every setting exactly'})."]
    s = decision.get("search") or {}
    if s:
        lines += [
            "",
            f"Search (paired with OFF inside its trial, {s.get('measure') or '-'}): speedup {_x(s.get('speedup'))}"
            f"{_span(s.get('low'), s.get('high'))}.",
        ]
    return lines


def write_target(
    out_dir: Path, target: str, record: ExportRecord | None, decision: dict[str, Any], final_dir: Path | None = None
) -> list[Path]:
    """One target's folder: its server file (ON or OFF as decided), spectune.yaml of the winner, README.md.

    `record` is the winner's export record (None when the target has no feasible winner: only OFF is written,
    from `decision["off_record"]`); `final_dir` is where the folder will be once swapped in (default out_dir).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    engine = None if record is None else _engine_dict(record.engine)
    rows: list[Mapping] = []
    if record is not None:
        paths.append(spectune_yaml.write(out_dir, record, final_dir))
    base = record if record is not None else decision["off_record"]
    if target != SPECTUNE:
        chosen = base if (decision["on"] and record is not None) else off(base)
        written, rows = SERVERS[target].write(out_dir, chosen)
        paths += written
        if record is not None and chosen is not record:  # OFF: still show how the best it could run maps
            _, rows = SERVERS[target].build(record)
    elif record is not None:
        for writer in SERVERS.values():  # how the engine's best maps to every server, for the README
            _, more = writer.build(record)
            rows += more
    lines = _decision_lines(target, decision, engine)
    lines += ["", _measured_line(base)]
    if record is not None:
        lines += ["", "## Confirmed numbers", "", *readme.confirmed_lines(record.confirmed or {})]
    if rows:
        heading = "How each setting maps" if decision["on"] or target == SPECTUNE else "How that configuration maps"
        lines += ["", f"## {heading}" + ("" if target == SPECTUNE else f" ({target})"), ""]
        lines += readme.mapping_lines(rows)
    if record is not None:
        lines += [
            "",
            "## What transfers",
            "",
            readme.TRANSFERS,
            "",
            *readme.cost_lines(record.cost_ratios, llama_server.measured_in_server(record.engine)),
        ]
    path = out_dir / readme.FILE
    write_atomic(path, "\n".join(lines) + "\n")
    paths.append(path)
    return paths


def _measured_line(record: ExportRecord) -> str:
    """Where the numbers come from: the device, and on engine.backend=llama-server the real server."""
    where = f"Model `{record.model_name}` (target `{record.target}`), hardware profile `{record.hardware}`, timings "
    where += "measured on CPU" if record.measured_on == "cpu" else f"measured on {record.measured_on.upper()}"
    if llama_server.measured_in_server(record.engine):
        where += (
            " in a real llama-server running exactly the flags llama-server.args holds (engine.backend=llama-server)"
        )
    if record.measured_on == "cpu":
        where += "; CPU timings do not predict a GPU server's: re-measure on the serving hardware"
    return where + "."


def _engine_dict(engine: EngineConfig) -> dict[str, Any]:
    return {
        "drafter": engine.drafter,
        "gamma": engine.gamma,
        "gamma_policy": engine.gamma_policy,
        "options": dict(engine.options),
    }


def write_index(best_dir: Path, rows: list[dict[str, Any]], header: list[str]) -> Path:
    """best/README.md: one row per target (dicts with target, engine, decision)."""
    lines = [
        "# Exported configurations",
        "",
        *header,
        "",
        "| target | export | configuration | search speedup | confirmed speedup | maps | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        d = row["decision"]
        s, c = d.get("search") or {}, d.get("confirmed") or {}
        iv = c.get("speedup_interval") or {}
        confirmed = "-" if not c else f"{_x(iv.get('pooled'))}{_span(iv.get('low'), iv.get('high'))}"
        export = "ON" if d["on"] else "OFF"
        why = str(d["reason"]).replace("|", "\\|")
        lines.append(
            f"| {row['target']} | {export} ([{folder_name(row['target'])}/]({folder_name(row['target'])}/)) | "
            f"{configuration(row.get('engine'))} | {_x(s.get('speedup'))}{_span(s.get('low'), s.get('high'))} | "
            f"{confirmed} | {d.get('fit') or '-'} | {why} |"
        )
    path = best_dir / INDEX
    write_atomic(path, "\n".join(lines) + "\n")
    return path
