"""`python -m bench batch`: aggregate decode throughput of the engine with N sessions in one batch.

Each measurement prefills N sessions' prompts (untimed), then decodes them together through one Batch
(engine/batch.py: every step one ragged target forward for all of them), greedy, a fixed number of new
tokens per session, stop tokens ignored, and reports N x new tokens / wall seconds of that decoding. Cases
are interleaved: every repeat walks every (N, drafter) pair in a rotated order, so OFF at N and a drafter
at N are measured side by side in each repeat, and the ON/OFF ratio at N is the median of the per-repeat
ratios. The prompts are the agent's own context on swe-lite test instances (bench/agent_prompts.py), one
per session.

`device` and `dtype` (default cpu, float32) place both models; on CUDA the clock is read only after the
queued kernels finished (bench.costs.synchronize).

Streams: every session's tokens are compared with the same prompt decoded alone, plain (N = 1, drafter
none). In float64 they are equal by construction (tests/engine/test_batched_conformance.py); in a model's
own dtype a batch's different row count can round a near tie the other way, which shows as diverged
streams here, counted, never hidden.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from bench.costs import synchronize
from common.errors import ConfigError
from engine.engine import Engine, EngineConfig
from engine.loading import LoadedModel, load_model
from engine.mtp import load_mtp

DRAFTERS = ("none", "ngram", "suffix", "draft_model", "mtp")
SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class BatchSetup:
    """What `bench batch` measures: the models, the cases and the repeats."""

    model_dir: str = "models/spectune-tiny"  # folder with target/ (draft/, mtp/ where the drafters need them)
    sizes: tuple[int, ...] = SIZES  # sessions per batch
    drafters: tuple[str, ...] = DRAFTERS  # drafters measured; none (OFF) always runs
    gamma: int = 4  # draft tokens per step
    max_new_tokens: int = 64  # new tokens per session and generation
    repeats: int = 3  # timed passes over every case
    forward: str = "auto"  # numeric path (engine/forward.py)
    dtype: str = "float32"  # weights' dtype
    device: str = "cpu"  # cpu, cuda, cuda:N or auto (engine.loading.resolve_device)


def _engines(setup: BatchSetup) -> tuple[LoadedModel, dict[str, Engine]]:
    """The target and one engine per drafter (a drafter whose model is missing is left out with a line)."""
    from pathlib import Path

    root = Path(setup.model_dir)
    where = {"device": setup.device, "dtype": setup.dtype, "forward": setup.forward}
    target = load_model(str(root / "target"), **where)
    draft = load_model(str(root / "draft"), **where) if (root / "draft").is_dir() else None
    mtp = load_mtp(str(root / "mtp"), target.model) if (root / "mtp" / "config.json").is_file() else None
    engines = {}
    for name in ("none", *[d for d in setup.drafters if d != "none"]):
        engines[name] = Engine(target, EngineConfig(drafter=name, gamma=setup.gamma), draft=draft, mtp=mtp)
    return target, engines


def run_batch_bench(setup: BatchSetup, progress: bool = True) -> dict[str, Any]:
    """Measure every (N, drafter) case `setup.repeats` times, interleaved; return the report."""
    import sys

    from bench.agent_prompts import agent_prompts

    target, engines = _engines(setup)
    count = max(setup.sizes)
    prompts = [a.ids for a in agent_prompts(target.tokenizer, "test", count=count)]
    if len(prompts) < count:
        raise ConfigError(f"bench batch: {count} sessions need {count} agent prompts, the suite gave {len(prompts)}")
    new, no_stop = setup.max_new_tokens, frozenset()
    # Reference streams: each prompt alone, plain.
    reference = [engines["none"].generate(p, 1 + new, stop_tokens=no_stop).tokens[1:] for p in prompts]
    for engine in engines.values():  # warm-up: first-call allocations, every batch size once
        for n in setup.sizes:
            engine.generate_together(prompts[:n], 8, stop_tokens=no_stop)
        engine.reset_drafter_state()
    cases = [(n, d) for n in setup.sizes for d in engines]
    rates: dict[tuple[int, str], list[float]] = {c: [] for c in cases}
    accepted_len: dict[tuple[int, str], list[float]] = {c: [] for c in cases}
    diverged: dict[tuple[int, str], int] = dict.fromkeys(cases, 0)
    t_start = time.perf_counter()
    for r in range(setup.repeats):
        shift = r % len(cases)
        for n, d in cases[shift:] + cases[:shift]:
            engine = engines[d]
            engine.reset_drafter_state()  # every repeat starts from an empty suffix index
            sessions = [engine.new_session() for _ in range(n)]
            # Untimed: the prompts' prefill (and one token), so the timed turn decodes only.
            engine.generate_together(prompts[:n], 1, sessions=sessions, stop_tokens=no_stop)
            synchronize(target.device)  # CUDA runs asynchronously: the prefill's kernels must not count
            t0 = time.perf_counter()
            results = engine.generate_together([s.history for s in sessions], new, sessions, no_stop)
            synchronize(target.device)
            wall = time.perf_counter() - t0
            rates[(n, d)].append(sum(len(x.tokens) for x in results) / wall)
            drafts = sum(x.stats.drafts for x in results)
            accepted_len[(n, d)].append(1 + sum(x.stats.accepted for x in results) / drafts if drafts else 1.0)
            diverged[(n, d)] = max(diverged[(n, d)], sum(x.tokens != reference[i] for i, x in enumerate(results)))
        if progress:
            print(f"bench batch: repeat {r + 1}/{setup.repeats} done", file=sys.stderr)
    rows = []
    for n, d in cases:
        off, on = rates[(n, "none")], rates[(n, d)]
        one = rates[(1, d)] if (1, d) in rates else None
        rows.append(
            {
                "sessions": n,
                "drafter": d,
                "tokens_per_s": statistics.median(on),
                "tokens_per_s_runs": on,
                "on_vs_off": statistics.median(a / b for a, b in zip(on, off, strict=True)),
                "on_vs_off_runs": [a / b for a, b in zip(on, off, strict=True)],
                "vs_one_session": statistics.median(a / b for a, b in zip(on, one, strict=True)) if one else None,
                "mean_accepted_length": statistics.median(accepted_len[(n, d)]),
                "diverged_streams": diverged[(n, d)],
            }
        )
    return {
        "setup": {
            **setup.__dict__,
            "threads": torch.get_num_threads(),
            "resolved_device": str(target.device),
            "forward_path": target.forward.choice.describe(),
            "prompts": len(prompts),
            "prompt_tokens": [len(p) for p in prompts[:count]],
            "wall_s": time.perf_counter() - t_start,
        },
        "rows": rows,
    }


def render(report: dict[str, Any]) -> None:
    """One rich table: per (N, drafter) aggregate tokens/s with every repeat, ON/OFF at N, scaling over N = 1."""
    from rich.table import Table

    from runners.report import table_console

    console = table_console()
    s = report["setup"]
    where = s.get("resolved_device", "cpu")
    on = "" if where == "cpu" else f" on {where}"  # the CPU line stays as it was
    console.print(
        f"[bold]bench batch[/] {s['model_dir']} · {s['forward_path']}{on} · threads {s['threads']} · gamma {s['gamma']}"
        f" · {s['max_new_tokens']} new tokens per session · repeats {s['repeats']} · {s['wall_s']:.0f} s"
    )
    table = Table(title="Aggregate decode tokens/s, N sessions per batch (median; every repeat in brackets)")
    for col in ("N", "drafter", "tok/s", "repeats", "ON/OFF at N", "vs N=1", "acc len", "diverged"):
        table.add_column(col, justify="left" if col == "drafter" else "right")
    for row in report["rows"]:
        runs = " ".join(f"{x:.0f}" for x in row["tokens_per_s_runs"])
        ratios = " ".join(f"{x:.2f}" for x in row["on_vs_off_runs"])
        table.add_row(
            str(row["sessions"]),
            row["drafter"],
            f"{row['tokens_per_s']:.0f}",
            f"[{runs}]",
            f"{row['on_vs_off']:.2f} [{ratios}]" if row["drafter"] != "none" else "-",
            f"{row['vs_one_session']:.2f}" if row["vs_one_session"] is not None else "-",
            f"{row['mean_accepted_length']:.2f}",
            f"{row['diverged_streams']}/{row['sessions']}",
        )
    console.print(table)
