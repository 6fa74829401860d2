"""Evaluate one model on a task suite with plain decoding: success rate, exit statuses, steps, per family.

    python -m runners.eval_model task=swe-lite task.split=test [model=spectune-tiny] [task.limit=N]
    python -m runners.eval_model task=swe-lite task.split=probe task.path=runs/probe   # a generalisation probe

Speculation is off (drafter none) whatever `engine.drafter` says; the engine's sampling settings
(temperature, top_k, top_p) and `run.seed` apply. The agent, sandbox and evaluation are the runner's
own (a `Comparison` with no candidate); only the target model is loaded. Writes runs/<run.name>/
eval.json, predictions.jsonl (SWE-bench format), repeats.jsonl (appended as tasks finish) and
trajectories/. Ctrl-C / SIGTERM, `run.resume` and `run.overwrite` work as in `runners.run`: a partial
eval.json after the task in flight (at once on a second signal), exit status 130 / 143.
Non-goal: speed comparisons (that is `runners.run`, OFF vs ON in one process).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.table import Table

from agents.loop import STATUSES as AGENT_STATUSES
from engine.drafters import Needs
from runners.cli import CONF_DIR, run_command
from runners.concurrency import concurrency_summary
from runners.config import baseline_config, check_config, register_configs
from runners.interrupt import GracefulStop
from runners.outcomes import SideRun
from runners.outputs import RAW, dumps_strict, write_atomic, write_raw
from runners.provenance import provenance
from runners.report import table_console
from runners.run import outcomes_in_order, prepare
from runners.runfolder import announce_resume, plan, record_until_stopped
from runners.summary import side_summary
from runners.tracking import finish_or_report, make_tracker
from tasks.schema import Instance
from tasks.suites import swe_lite_root, verify_swe_lite

# side_summary keys left out of eval.json's `generation` block: reported at the top, or drafting-only.
NOT_GENERATION = (
    "success_rate",
    "successes",
    "tasks",
    "statuses",
    "unsupported",
    "per_position",
    "acceptance_rate",
    "mean_accepted_length",
)
EVAL_FILE = "eval.json"
PREDICTIONS_FILE = "predictions.jsonl"
# The primary config: the runner's conf/config.yaml with plain decoding and a run name that says "eval".
CONFIG_NAME = "eval_model"


def _rate(successes: int, tasks: int) -> dict[str, Any]:
    return {"tasks": tasks, "successes": successes, "success_rate": successes / tasks if tasks else None}


def _group(runs: list[SideRun], key: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Tasks, successes and success rate per group (task runs grouped by `key[instance_id]`)."""
    tasks: Counter[str] = Counter(key[r.instance_id] or "unknown" for r in runs)
    wins: Counter[str] = Counter(key[r.instance_id] or "unknown" for r in runs if r.success)
    return {name: _rate(wins[name], tasks[name]) for name in sorted(tasks)}


def breakdown(runs: list[SideRun], instances: list[Instance]) -> dict[str, Any]:
    """Success rate, agent exit statuses, evaluation statuses, mean steps, success per family and difficulty."""
    statuses = dict.fromkeys(AGENT_STATUSES, 0)  # every status listed, so runs compare key by key
    statuses.update(Counter(r.status for r in runs))
    return {
        **_rate(sum(r.success for r in runs), len(runs)),
        "statuses": statuses,
        "evaluation_statuses": dict(sorted(Counter(r.evaluation_status for r in runs).items())),
        "mean_steps": statistics.fmean(r.steps for r in runs) if runs else None,
        "by_family": _group(runs, {i.instance_id: i.family for i in instances}),
        "by_difficulty": _group(runs, {i.instance_id: i.difficulty for i in instances}),
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def eval_tables(result: dict[str, Any], title: str) -> list[Table]:
    """The overview (success rate, statuses, steps, speed) and one table per family and per difficulty."""
    overview = Table(title=title, title_justify="left")
    overview.add_column("metric")
    overview.add_column("value", justify="right")
    overview.add_row("success rate", f"{_pct(result['success_rate'])} ({result['successes']} / {result['tasks']})")
    for status, count in result["statuses"].items():
        overview.add_row(f"exit status: {status}", str(count))
    for status, count in result["evaluation_statuses"].items():
        overview.add_row(f"evaluation: {status}", str(count))
    steps = result["mean_steps"]
    overview.add_row("mean steps", "-" if steps is None else f"{steps:.1f}")
    gen = result["generation"]
    tokens_per_s = gen.get("decode_tokens_per_s")
    overview.add_row("decode tokens/s", "-" if tokens_per_s is None else f"{tokens_per_s:.1f}")
    overview.add_row("agent time (evaluation apart)", f"{gen.get('agent_time_s') or 0.0:.1f} s")
    tables = [overview]
    for key, label in (("by_family", "mutation family"), ("by_difficulty", "difficulty")):
        table = Table(title=f"success by {label}", title_justify="left")
        for column in (label, "tasks", "successes", "success rate"):
            table.add_column(column, justify="left" if column == label else "right")
        for name, row in result[key].items():
            table.add_row(name, str(row["tasks"]), str(row["successes"]), _pct(row["success_rate"]))
        tables.append(table)
    return tables


def _suite_hash(name: str, split: str, path: str | None) -> str | None:
    """Content hash of the loaded swe-lite folder: the bundled suite's, or a probe's own (None for hub suites)."""
    if name != "swe-lite":
        return None
    return verify_swe_lite(swe_lite_root(path, split))["content_hash"]


def _predictions(runs: list[SideRun], model_name: str) -> str:
    """SWE-bench predictions, one JSON line per task run."""
    rows = [{"instance_id": r.instance_id, "model_name_or_path": model_name, "model_patch": r.patch} for r in runs]
    return "".join(json.dumps(row) + "\n" for row in rows)


def evaluate_model(cfg: DictConfig, console: Console | None = None) -> dict[str, Any]:
    """Run the model on the configured tasks with plain decoding and write eval.json; returns its content.

    Signals, resume and overwrite behave as in `runners.run` (the first SIGINT/SIGTERM stops after the
    task in flight, a second one at once; eval.json is then written with `partial: true`).
    """
    console = console or Console(stderr=True)
    speculative = check_config(cfg)  # validates the whole config before anything is loaded
    plain = baseline_config(speculative)  # drafter none with the configured sampling and seed
    task = cfg.task
    folder = plan(Path(cfg.run.root) / cfg.run.name, cfg, eval_run=True)  # reads only
    if cfg.engine.drafter != "none":
        console.print(
            f"[yellow]note:[/] eval_model decodes plainly; engine.drafter={cfg.engine.drafter} is ignored "
            "(compare speculation with `python -m runners.run`)"
        )
    with GracefulStop(console) as stop:
        with stop.loading():
            instances, models, out_dir, comparison = prepare(cfg, None, Needs(), draft=None, plain=plain)
            config_dict = OmegaConf.to_container(cfg, resolve=True)
            tracker = make_tracker(cfg.tracking.enabled, cfg.tracking.uri, cfg.tracking.experiment, out_dir)
        finished = folder.finished(instances, ("baseline",))
        comparison.skip = {(o.instance_id, o.repeat) for o in finished}
        folder.claim(cfg, finished)  # from here on the run folder is this run's
        tags = {"kind": "eval", "model": cfg.model.name, "task": f"{task.name}/{task.split}", "drafter": "none"}
        tracker.start(cfg.run.name, config_dict, tags)
        total = len(instances) * cfg.run.repeats
        console.print(
            f"{len(instances)} task(s) x {cfg.run.repeats} repeat(s), plain decoding (temperature={plain.temperature}) "
            f"of {cfg.model.name} -> {out_dir}"
        )
        announce_resume(console, len(finished), total)
        outcomes = list(finished)
        record_until_stopped(comparison, stop, out_dir, outcomes, cfg.run.progress, console)
        assert all(o.baseline is not None for o in outcomes)  # measured here, never supplied
        outcomes = outcomes_in_order(outcomes)
        runs: list[SideRun] = [o.baseline for o in outcomes if o.baseline is not None]
        partial = len(outcomes) < total
        if partial:
            console.print(f"[yellow]interrupted:[/] writing a partial eval of {len(runs)} finished task run(s)")
        with stop.hold():
            result = _result(cfg, instances, models, runs, plain, partial, stop.signal_name if partial else None)
            if comparison.waves:  # run.concurrency > 1: the waves' throughput and request latency
                result["concurrency"] = concurrency_summary(comparison.waves)
            paths = [out_dir / EVAL_FILE, out_dir / PREDICTIONS_FILE]
            write_atomic(paths[0], dumps_strict(result))
            write_atomic(paths[1], _predictions([r for r in runs if r.repeat == 0], cfg.model.name))
            write_raw(out_dir, outcomes)
            paths.append(out_dir / RAW)
            if (out_dir / "trajectories").is_dir():
                paths.append(out_dir / "trajectories")
            title = f"{cfg.model.name} on {task.name}/{task.split}, plain decoding"
            tables = table_console()
            for table in eval_tables(result, title):
                tables.print(table)
            status = "KILLED" if partial else "FINISHED"
            finish_or_report(tracker, status, console, lambda: _track(tracker, result, runs, paths))
            console.print(f"results: {paths[0]}")
    return result


def _result(cfg, instances, models, runs, plain, partial: bool, interrupted: str | None) -> dict[str, Any]:
    """The content of eval.json."""
    task = cfg.task
    by_id = {i.instance_id: i for i in instances}
    # Speed and token counts of the plain decoding; successes and statuses are reported above it.
    generation = {k: v for k, v in side_summary(runs, cfg.run.repeats).items() if k not in NOT_GENERATION}
    return {
        "name": cfg.run.name,
        "partial": partial,
        "interrupted": interrupted,
        "model": {
            "name": cfg.model.name,
            "target": models.target_path,
            "dtype": str(models.target.dtype).removeprefix("torch."),
        },
        "task": {
            "name": task.name,
            "split": task.split,
            "path": task.path,
            "instances": len(instances),
            "content_hash": _suite_hash(task.name, task.split, task.path),
        },
        "decoding": {
            "drafter": "none",
            "temperature": plain.temperature,
            "top_k": plain.top_k,
            "top_p": plain.top_p,
            "seed": plain.seed,
        },
        "repeats": cfg.run.repeats,
        **breakdown(runs, instances),
        "generation": generation,
        "per_task": [
            {
                **r.to_dict(),
                "family": by_id[r.instance_id].family,
                "difficulty": by_id[r.instance_id].difficulty,
                "patch": r.patch,
            }
            for r in runs
        ],
        "provenance": provenance(
            task.name, cfg.run.seed, models.target.device, task.split, task.path, models.forward_paths()
        ),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }


def _track(tracker, result: dict[str, Any], runs: list[SideRun], paths: list[Path]) -> None:
    """Log the evaluation as the parent's plain-decoding side (runners.tracking.finish_or_report finishes it)."""
    rows = [
        {"instance_id": r.instance_id, "step": step, "time_s": r.time_s, "success": r.success, "repeat": r.repeat}
        for step, r in enumerate(runs)
    ]
    keys = ("success_rate", "successes", "tasks", "mean_steps", "statuses", "by_family", "by_difficulty")
    side = {**{k: result[k] for k in keys}, **result["generation"]}
    tracker.log_side("baseline", {"side": "baseline", "drafter": "none"}, {"side": "baseline"}, side, rows, {})
    tracker.log_artifacts(paths)


register_configs()


@hydra.main(config_path=CONF_DIR, config_name=CONFIG_NAME, version_base=None)
def main(cfg: DictConfig) -> None:
    """Entry point: Hydra composes conf/eval_model.yaml; bad config or input exits 2 with one line."""
    run_command(evaluate_model, cfg)


if __name__ == "__main__":
    main()
