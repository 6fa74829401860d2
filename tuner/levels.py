"""The answer over concurrency levels (`tuner.concurrency=[1, 4]`): what is best at each load, per target.

Each level is its own study (tuner/setup.py `at_level`: `<name>` for 1 agent, `<name>-n<N>` for N at once), with
its own confirmation and its own best/ folder, whose files already run that load: llama-server `-np N
--kv-unified` with the best `--spec-type` at N (or `none`), vLLM `--max-num-seqs N`, SGLang
`--max-running-requests N`. This module writes what only the levels together say, into `runs/<name>/levels/`:
README.md with one table per target (agents at once, the exported configuration or speculation off, the
confirmed speedup at that load), and vLLM's one config for every load, its `num_speculative_tokens_per_batch_size`
table (export/vllm.py `build_levels`; absent, with the reason, where the levels' best differ in method).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.files import write_atomic
from engine.engine import EngineConfig
from export import vllm
from export.files import dumps_strict
from export.readme import levels_lines, mapping_lines
from export.record import ExportRecord, PerLevel
from tuner.setup import TuneSetup

LEVELS_DIR = "levels"
SPECTUNE = "spectune"


def best_per_level(summaries: dict[int, dict[str, Any]]) -> dict[str, PerLevel]:
    """Per target, each level's exported configuration (None where that level's export is speculation off)."""
    out: dict[str, PerLevel] = {}
    for level, summary in sorted(summaries.items()):
        for target, winner in (summary.get("winners") or {}).items():
            on = winner.get("on") and winner.get("engine")
            out.setdefault(target, {})[level] = EngineConfig(**winner["engine"]) if on else None
    return out


def speedups_per_level(summaries: dict[int, dict[str, Any]], target: str) -> dict[int, dict[str, Any] | None]:
    """Per level where `target`'s export is ON, the confirmed speedup there (speedup, low, high)."""
    out: dict[int, dict[str, Any] | None] = {}
    for level, summary in summaries.items():
        winner = (summary.get("winners") or {}).get(target) or {}
        if not winner.get("on"):
            continue  # an OFF level's candidate did not beat OFF: its figure is in the reasons below the table
        confirmed = winner.get("confirmed") or {}
        interval = confirmed.get("speedup_interval") or {}  # tuner/confirm.py: pooled, low, high, ...
        # the pooled speedup the interval is about (what the decision and the console print), else the median
        speedup = interval.get("pooled", confirmed.get("speedup"))
        out[level] = {"speedup": speedup, "low": interval.get("low"), "high": interval.get("high")}
    return out


def write_levels(setup: TuneSetup, summaries: dict[int, dict[str, Any]], record: ExportRecord) -> dict[str, Any]:
    """runs/<name>/levels/: README.md (the tables) and vLLM's per-batch-size config; returns what was written.

    `record` names the target weights and model (its engine is not used): each level's configuration comes from
    that level's study.
    """
    out_dir = setup.study_dir / LEVELS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    best = best_per_level(summaries)
    lines = [
        f"# Best configuration per load: `{setup.study.name}`",
        "",
        f"One study per level (agents at once): {', '.join(f'`{_study_name(setup, n)}`' for n in sorted(summaries))}"
        ". Each was measured and confirmed paired with OFF at its own load; each study's `best/` folder holds the "
        "files for that load (llama-server `-np N --kv-unified`, vLLM `--max-num-seqs N`, SGLang "
        "`--max-running-requests N`).",
        "",
    ]
    for target, per_level in best.items():
        lines += [f"## {target}", "", *levels_lines(per_level, speedups_per_level(summaries, target)), ""]
        for level in sorted(summaries):
            winner = (summaries[level].get("winners") or {}).get(target) or {}
            if not winner.get("on"):
                lines.append(
                    f"- {level} at once, speculation off: {winner.get('reason') or 'no feasible configuration'}"
                )
        lines.append("")
    written: dict[str, Any] = {"dir": str(out_dir), "best": {t: _plain(p) for t, p in best.items()}}
    vllm_best = best.get(vllm.TARGET)
    if vllm_best is not None:
        config, rows = vllm.build_levels(record, vllm_best)
        if config:
            path = out_dir / vllm.FILE
            write_atomic(path, dumps_strict(config))
            written["vllm"] = str(path)
            lines += [
                f'`{vllm.FILE}`: one config for every load (`vllm serve ... --speculative-config "$(cat '
                f'{vllm.FILE})"`).',
                "",
            ]
        elif config == {}:
            lines += ["vLLM: speculation off at every load (no `--speculative-config`).", ""]
        else:
            lines += ["vLLM: no one configuration serves every load (below); run each level's own `best/vllm/`.", ""]
        lines += ["### vLLM over the levels", "", *mapping_lines(rows), ""]
    path = out_dir / "README.md"
    write_atomic(path, "\n".join(lines))
    written["readme"] = str(path)
    return written


def _study_name(setup: TuneSetup, level: int) -> str:
    return setup.study.name if level == 1 else f"{setup.study.name}-n{level}"


def _plain(per_level: PerLevel) -> dict[str, Any]:
    return {str(n): (None if c is None else c.drafter + f" gamma={c.gamma}") for n, c in per_level.items()}


def levels_dir(study_dir: Path) -> Path:
    """Where write_levels writes for the study in `study_dir`."""
    return study_dir / LEVELS_DIR
