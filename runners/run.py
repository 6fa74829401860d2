"""Run one speculative configuration over a task suite, speculation OFF vs ON, in one process.

    python -m runners.run task=swe-lite task.split=dev task.limit=5 engine.drafter=ngram engine.gamma=4 run.repeats=3

Writes runs/<run.name>/ (summary.json, per_task.jsonl, repeats.jsonl, trajectories/, predictions-*.jsonl,
plots) and logs a parent MLflow run with one child per side (`mlflow ui --backend-store-uri
sqlite:///runs/mlflow.db`). Ctrl-C or SIGTERM stops after the task in flight and writes a partial summary
(`partial: true`, exit status 130 / 143); a second one stops at once, still writing the summary of the task
runs finished before. Finished task runs are appended to repeats.jsonl as they finish: `run.resume=true`
continues a stopped run under the same run.name, `run.overwrite=true` replaces it; reusing a run.name
with neither is refused (exit 2). Bad configuration or input files: one line on stderr, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from common.units import GIB
from engine.drafters import Needs
from engine.engine import EngineConfig
from runners.backends import backend_class
from runners.backends.llama_server_setup import reference_settings
from runners.cli import CONF_DIR, run_command
from runners.compare import Comparison
from runners.concurrency import concurrency_summary
from runners.config import check_candidate, register_configs
from runners.interrupt import GracefulStop
from runners.models import Models, load_for
from runners.outcomes import SIDES, TaskOutcome
from runners.outputs import write_outputs
from runners.plots import save_plots
from runners.provenance import provenance
from runners.report import summary_table, table_console
from runners.runfolder import announce_resume, plan, record_until_stopped
from runners.summary import summarize
from runners.tracking import finish_or_report, make_tracker
from runners.workload import Workload
from tasks.environment import make_environment
from tasks.schema import Instance
from tasks.suites import load_suite


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def hardware_block(cfg: DictConfig, device: torch.device, summary: dict[str, Any]) -> dict[str, Any]:
    """The VRAM ceiling, the estimate checked against it, and where timings were really measured."""
    ceiling = int(cfg.hardware.vram_gib * GIB)
    peaks = {s: summary[s]["peak_memory_bytes"] for s in SIDES}
    return {
        "name": cfg.hardware.name,
        "vram_ceiling_bytes": ceiling,
        "peak_memory_bytes": peaks,
        "within_ceiling": {s: (None if p is None else p <= ceiling) for s, p in peaks.items()},
        "timings_measured_on": "cuda" if device.type == "cuda" else "cpu",
        "peak_memory_is_estimate": device.type != "cuda",
    }


def prepare(
    cfg: DictConfig,
    candidate: EngineConfig | None,
    needs: Needs,
    *,
    draft: str | None,
    plain: EngineConfig | None = None,
) -> tuple[list[Instance], Models, Path, Comparison]:
    """Instances, loaded models, output folder and the Comparison a command runs (shared by run and eval_model).

    `needs` (the candidate's drafter's, resolved once by check_candidate) says which heads are loaded and which
    files the backend's settings convert; `draft` is loaded whatever it says (runners.models.load_for).
    """
    task = cfg.task
    instances = load_suite(task.name, task.split, task.limit, list(task.instance_ids) or None, task.path, task.subset)
    environment = make_environment(task.name, cfg.sandbox.name, OmegaConf.to_container(cfg.sandbox.options))
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    device = cfg.model.device or cfg.hardware.device
    out_dir = Path(cfg.run.root) / cfg.run.name
    backend = backend_class((candidate or plain or EngineConfig()).backend)
    models = load_for(
        cfg.model,
        needs,
        device=device,
        weights=backend.decodes_in_process,  # a server decodes: no weights in this process
        server_binary=cfg.server.binary,
        log_dir=out_dir / "server-logs",
        draft=draft,
    )
    settings = backend.settings_from(cfg, models, out_dir / "server-logs", needs)
    workload = Workload.from_config(
        cfg,
        models,
        instances,
        environment,
        plain=plain,
        server=settings,
        baseline_server=reference_settings(cfg, settings),
    )
    return instances, models, out_dir, Comparison(workload, candidate, out_dir)


def execute(cfg: DictConfig, console: Console | None = None) -> dict[str, Any]:
    """Run the configured comparison and write its outputs; returns the summary. Raises on bad config.

    The first SIGINT/SIGTERM stops after the task in flight, a second one at once; either way the
    summary of the finished task runs is written with `partial: true` (runners/interrupt.py).
    """
    console = console or Console(stderr=True)
    candidate, drafter = check_candidate(cfg)
    task = cfg.task
    folder = plan(Path(cfg.run.root) / cfg.run.name, cfg)  # reads only: refuse before loading anything
    with GracefulStop(console) as stop:
        with stop.loading():
            instances, models, out_dir, comparison = prepare(cfg, candidate, drafter.needs, draft=cfg.model.draft)
            config_dict = OmegaConf.to_container(cfg, resolve=True)
            tracker = make_tracker(cfg.tracking.enabled, cfg.tracking.uri, cfg.tracking.experiment, out_dir)
        sides = SIDES if comparison.candidate_engine is not None else ("baseline",)
        outcomes: list[TaskOutcome] = folder.finished(instances, sides)
        comparison.skip = {(o.instance_id, o.repeat) for o in outcomes}
        folder.claim(cfg, outcomes)  # from here on the run folder is this run's
        torch_device = models.target.device
        if torch_device.type != "cuda" and models.target.model is not None:  # served: llama_server_setup's note
            console.print(
                f"[yellow]note:[/] no CUDA device: timings are measured on the CPU; hardware={cfg.hardware.name} "
                f"sets only the VRAM ceiling ({cfg.hardware.vram_gib:g} GiB) checked against the memory estimate."
            )
        if comparison.unsupported:
            console.print(f"[red]unsupported:[/] {comparison.unsupported} (the baseline still runs)")
        tags = {
            "hardware": cfg.hardware.name,
            "model": cfg.model.name,
            "task": f"{task.name}/{task.split}",
            "lossy": str(comparison.lossy).lower(),
            "drafter": cfg.engine.drafter,
        }
        tracker.start(cfg.run.name, _flatten(config_dict), tags)
        total = len(instances) * cfg.run.repeats
        console.print(
            f"{len(instances)} task(s) x {cfg.run.repeats} repeat(s), OFF vs ON "
            f"(drafter={cfg.engine.drafter}, gamma={cfg.engine.gamma}, acceptance={cfg.engine.acceptance}) -> {out_dir}"
        )
        for side, described in comparison.describe().items():
            line = backend_class(described["backend"]).announce(described)
            if line:
                console.print(f"{side} {line}")
        announce_resume(console, len(outcomes), total)
        record_until_stopped(comparison, stop, out_dir, outcomes, cfg.run.progress, console)
        partial = len(outcomes) < total
        status = "KILLED" if partial else "FINISHED"
        if partial:
            console.print(f"[yellow]interrupted:[/] writing a partial summary of {len(outcomes)} finished task run(s)")
        with stop.hold():
            summary = summarize(
                outcomes_in_order(outcomes),
                repeats=cfg.run.repeats,
                lossy=comparison.lossy,
                greedy=comparison.greedy,
                unsupported=comparison.unsupported,
                extra={
                    "name": cfg.run.name,
                    "partial": partial,
                    "interrupted": stop.signal_name if partial else None,
                    "provenance": provenance(
                        task.name, cfg.run.seed, torch_device, task.split, task.path, models.forward_paths()
                    ),
                    "config": config_dict,
                    "backend": comparison.describe(),
                    "concurrency": concurrency_summary(comparison.waves),
                },
            )
            summary["hardware"] = hardware_block(cfg, torch_device, summary)
            paths = write_outputs(out_dir, summary, outcomes_in_order(outcomes), cfg.model.name)
            save_plots(summary, out_dir)  # the PNGs exist with tracking off too
            if (out_dir / "trajectories").is_dir():
                paths.append(out_dir / "trajectories")
            device_name = summary["provenance"]["device"]
            title = f"{task.name}/{task.split}: {len(instances)} task(s) x {cfg.run.repeats} repeat(s) on {device_name}"
            table_console().print(summary_table(summary, title))
            ordered = outcomes_in_order(outcomes)
            finish_or_report(tracker, status, console, lambda: _log(tracker, summary, ordered, paths, tags))
            console.print(f"results: {out_dir / 'summary.json'}")
    return summary


def outcomes_in_order(outcomes: list[TaskOutcome]) -> list[TaskOutcome]:
    """Repeat by repeat, task by task: the order of an uninterrupted run (resumed ones included)."""
    return sorted(outcomes, key=lambda o: (o.repeat, o.index))


def _log(tracker, summary, outcomes, paths, tags) -> None:
    """Send everything to the tracker (runners.tracking.finish_or_report finishes it, or reports a failure)."""
    for side in SIDES:
        rows = [
            {
                "instance_id": o.instance_id,
                "step": step,
                "time_s": run.time_s,
                "success": run.success,
                "repeat": o.repeat,
            }
            for step, o in enumerate(outcomes)
            if (run := getattr(o, side)) is not None
        ]
        side_params = {
            "side": side,
            "drafter": "none" if side == "baseline" else summary["config"]["engine"]["drafter"],
        }
        tracker.log_side(
            side, side_params, {**tags, "side": side}, summary[side], rows, summary[side]["per_position"] or {}
        )
    tracker.log_comparison(
        {
            "regressions": len(summary["regressions"]),
            "improvements": len(summary["improvements"]),
            "diverged_tasks": len(summary["diverged_tasks"]),
            "speedup": summary["speedup"],
            "cost_verify_over_step": summary["cost_ratios"]["verify_over_step"],
            "cost_draft_over_verify": summary["cost_ratios"]["draft_over_verify"],
        }
    )
    tracker.log_artifacts(paths)
    tracker.log_plots(summary)


register_configs()


@hydra.main(config_path=CONF_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    """Hydra entry point; configuration and input problems exit 2 with a one-line message."""
    run_command(execute, cfg)


if __name__ == "__main__":
    main()
