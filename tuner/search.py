"""The tuner: `python -m tuner.search hardware=rtx4060 task=swe-lite`.

Optuna over engine configurations (conf/space/*.yaml) on the search split: speculation OFF measured
once as trial 0, every candidate compared with it through the runner's `Comparison`, per-task pruning,
VRAM / context / quality constraints, then the best feasible configuration confirmed against a live
OFF on held-out tasks and exported for llama-server, vLLM and SGLang. One process, models loaded once.

Writes runs/<study.name>/: the storage (study.db by default), trials.jsonl, baseline.json,
confirmation.json, summary.json, plots/, best/ (the exports), trials/ and confirm/ (trajectories).
The same command with the same study.name resumes. Ctrl-C / SIGTERM finishes the task in flight,
records the trial (re-queued on resume) and leaves a resumable study (exit 130 / 143); bad
configuration or input: one line on stderr, exit 2.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hydra
import optuna
import torch
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from engine.drafters import drafter_needs
from engine.engine import EngineConfig
from runners.cli import CONF_DIR, run_command
from runners.compare import Comparison
from runners.config import agent_config, check_config
from runners.interrupt import GracefulStop, Interrupted, until_stopped
from runners.models import load_models
from runners.outputs import dumps_strict, write_atomic
from runners.provenance import provenance
from runners.report import table_console
from runners.server_setup import server_settings
from runners.tracking import default_uri
from runners.workload import Workload
from tasks.environment import make_environment
from tasks.suites import load_suite
from tuner import constraints
from tuner import study as studies
from tuner.baseline import drift, load_baseline
from tuner.config import register_tune_configs
from tuner.confirm import CONFIRMATION_FILE, confirm
from tuner.objective import Objective, settings_from
from tuner.plots import save_study_plots
from tuner.report import StudyProgress, trials_table
from tuner.space import load_space
from tuner.storage import describe_storage, open_storage
from tuner.tracking import make_study_tracker

SUMMARY_FILE = "summary.json"
TUNER_KEYS = ("space", "study", "tuner")  # the tuner's nodes; the rest is the runner's config


def check_tuner(cfg: DictConfig) -> None:
    """The tuner's own values (the runner's are checked by check_config)."""
    t = cfg.tuner
    if t.trials < 0:
        raise ValueError(f"tuner.trials must be >= 0, got {t.trials}")
    if t.confirm_repeats < 1:
        raise ValueError(f"tuner.confirm_repeats must be >= 1, got {t.confirm_repeats}")
    if t.timeout_s is not None and t.timeout_s <= 0:
        raise ValueError(f"tuner.timeout_s must be positive or null, got {t.timeout_s}")
    if cfg.study.heartbeat_interval < 1:
        raise ValueError(f"study.heartbeat_interval must be >= 1 s, got {cfg.study.heartbeat_interval}")
    studies.make_pruner(cfg.study.pruner, cfg.study.prune_p, cfg.study.prune_startup_steps)


def runner_config(cfg: DictConfig, engine: EngineConfig) -> dict[str, Any]:
    """The composed `runners.run` config that reproduces the confirmation with `engine`."""
    data = OmegaConf.to_container(cfg, resolve=True)
    for key in TUNER_KEYS:
        data.pop(key, None)
    data["engine"] = asdict(engine)
    data["task"].update(split=cfg.tuner.confirm_split, limit=cfg.tuner.confirm_limit, subset="spread")
    data["run"].update(name=f"{cfg.study.name}-confirmed", repeats=cfg.tuner.confirm_repeats)
    for key in ("resume", "overwrite"):  # a rerun starts a run of its own
        data["run"].pop(key, None)
    return data


def _check_same_study(study: optuna.Study, fingerprint: dict[str, Any], name: str) -> None:
    """A resumed study must search the same tasks and space; otherwise its trials are not comparable."""
    recorded = study.user_attrs.get("fingerprint")
    if recorded is None:
        study.set_user_attr("fingerprint", fingerprint)
        return
    differs = sorted(k for k in set(fingerprint) | set(recorded) if recorded.get(k) != fingerprint.get(k))
    if differs:
        raise ValueError(
            f"study {name!r} was created with other {', '.join(differs)}; keep them or choose another study.name"
        )


def _wait_for_baseline(study: optuna.Study, study_dir: Path, stop: GracefulStop, console: Console):
    """Another process is measuring the baseline: wait for baseline.json (or for that trial to end)."""
    console.print("another process is measuring the baseline (trial 0); waiting for it")
    while not stop.requested:
        record = load_baseline(study_dir)
        running = [
            t
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if studies.role(t) == "baseline"
        ]
        if record is not None or not running:
            return record
        time.sleep(1.0)
    return None


def execute(cfg: DictConfig, console: Console | None = None) -> dict[str, Any]:
    """Run (or resume) the study, confirm and export the best configuration; returns the summary."""
    console = console or _wide(Console(stderr=True))
    started = time.monotonic()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own lines say what happens; keep Optuna's warnings
    base = check_config(cfg)
    check_tuner(cfg)
    space = load_space(
        cfg.space, has_draft=bool(cfg.model.draft), has_mtp=bool(cfg.model.get("mtp")), backend=base.backend
    )
    task, tuner, study_cfg = cfg.task, cfg.tuner, cfg.study
    study_dir = Path(cfg.run.root) / study_cfg.name
    instances = load_suite(task.name, task.split, task.limit, list(task.instance_ids) or None, task.path, task.subset)
    random.Random(study_cfg.seed).shuffle(instances)  # pruning must not see one project first
    held_out = []
    if tuner.confirm:
        held_out = load_suite(task.name, tuner.confirm_split, tuner.confirm_limit, None, task.path, "spread")
        overlap = {i.instance_id for i in held_out} & {i.instance_id for i in instances}
        if overlap:
            console.print(f"[yellow]note:[/] {len(overlap)} confirmation task(s) are also search tasks")
    environment = make_environment(task.name, cfg.sandbox.name, OmegaConf.to_container(cfg.sandbox.options))
    storage = open_storage(
        study_cfg.storage, study_dir, heartbeat_interval=study_cfg.heartbeat_interval, max_retry=study_cfg.max_retry
    )
    tracker = make_study_tracker(cfg.tracking.enabled, cfg.tracking.uri, cfg.tracking.experiment, study_dir)
    fingerprint = {
        "tasks": [i.instance_id for i in instances],
        "repeats": cfg.run.repeats,
        "space": OmegaConf.to_container(cfg.space, resolve=True),
        "model": cfg.model.target,
    }
    if base.backend != "builtin":  # builtin studies made before backends existed keep their fingerprint
        fingerprint["backend"] = base.backend
    for note in space.left_out.items():
        console.print(f"[yellow]note:[/] drafter {note[0]} left out: {note[1]}")
    timings: dict[str, float] = {}
    with GracefulStop(console) as stop:
        try:
            if cfg.run.threads:
                torch.set_num_threads(cfg.run.threads)
            device = cfg.model.device or cfg.hardware.device
            needs = [drafter_needs(name) for name in space.drafters]
            draft = cfg.model.draft if any(n.draft_model for n in needs) else None
            models = load_models(
                cfg.model.target,
                draft,
                device=device,
                dtype=cfg.model.dtype,
                forward=cfg.model.forward,
                mtp=cfg.model.get("mtp") if any(n.mtp for n in needs) else None,
            )
        except KeyboardInterrupt:
            raise Interrupted(stop, "while loading") from None
        if stop.requested:
            raise Interrupted(stop, "while loading")
        torch_device = models.target.device
        server = None
        if base.backend == "llama-server":
            wants_mtp = any(n.mtp for n in needs) and bool(cfg.model.get("mtp"))
            server = server_settings(cfg, models, study_dir / "server-logs", draft=draft is not None, mtp=wants_mtp)
        memory = constraints.memory_facts(cfg, models, draft)
        if torch_device.type != "cuda":
            console.print(
                f"[yellow]note:[/] no CUDA device: timings are measured on the CPU; hardware={cfg.hardware.name} "
                f"sets only the VRAM ceiling ({cfg.hardware.vram_gib:g} GiB) checked against the memory model."
            )
        study = optuna.create_study(
            study_name=study_cfg.name,
            storage=storage,
            load_if_exists=True,
            direction="minimize",
            sampler=studies.make_sampler(study_cfg.seed, study_cfg.startup_trials),
            pruner=studies.make_pruner(study_cfg.pruner, study_cfg.prune_p, study_cfg.prune_startup_steps),
        )
        _check_same_study(study, fingerprint, study_cfg.name)
        record = load_baseline(study_dir) if studies.baseline_trial(study) is not None else None
        queued = studies.ensure_baseline_queued(study) if record is None else False
        if record is None and not queued:
            record = _wait_for_baseline(study, study_dir, stop, console)
        killed = studies.fail_dead_trials(study, storage, study_cfg.max_retry)
        requeued = studies.requeue_interrupted(study)
        config_dict = OmegaConf.to_container(cfg, resolve=True)
        resumed = tracker.open_study(
            study_cfg.name,
            {k: v for k, v in config_dict.items() if k not in ("space",)},
            {"hardware": cfg.hardware.name, "model": cfg.model.name, "task": f"{task.name}/{task.split}"},
        )
        done_before = len([t for t in study.get_trials(deepcopy=False) if t.state in studies.FINISHED])
        console.print(
            f"study {study_cfg.name!r} ({describe_storage(study_cfg.storage, study_dir)}): space {space.name!r} "
            f"{sorted(space.drafters)}, {len(instances)} search task(s) x {cfg.run.repeats} repeat(s) on "
            f"{task.name}/{task.split}, budget {tuner.trials} trial(s)"
            + (f"; resuming with {done_before} finished trial(s)" if done_before else "")
            + (f"; re-queued interrupted trial(s) {requeued}" if requeued else "")
            + (f"; retrying trial(s) {killed} of a killed process" if killed else "")
            + ("; baseline reused from baseline.json" if record is not None else "")
        )
        progress = StudyProgress(console, tuner.trials + (1 if record is None else 0), cfg.run.progress)

        def finished(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            studies.write_trials(study, study_dir)
            try:
                tracker.log_trial(trial)
            except Exception as exc:  # MLflow trouble never costs a trial: trials.jsonl has it
                console.print(f"[red]MLflow logging failed:[/] {type(exc).__name__}: {exc}")
            progress.trial_done(trial)
            if stop.requested or studies.budget_left(study, tuner.trials) == 0:
                study.stop()

        objective = Objective(
            models=models,
            instances=instances,
            environment=environment,
            space=space,
            base=base,
            study_dir=study_dir,
            memory=memory,
            stop=stop,
            baseline=record,
            **settings_from(cfg),
            on_task=progress.task_done,
            server=server,
        )
        left = studies.budget_left(study, tuner.trials) + (1 if record is None else 0)
        search_start = time.monotonic()
        verbosity = optuna.logging.get_verbosity()
        optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failed trial gets our own line, not a traceback
        try:
            with progress:
                if left and not stop.requested:
                    study.optimize(
                        objective, n_trials=left, timeout=tuner.timeout_s, catch=(Exception,), callbacks=[finished]
                    )
        except KeyboardInterrupt:
            stop.count = max(stop.count, 1)
        finally:
            optuna.logging.set_verbosity(verbosity)
            studies.write_trials(study, study_dir)
        timings["search_s"] = time.monotonic() - search_start
        record = objective.baseline
        trials = study.get_trials(deepcopy=False)
        best = studies.best_candidate(study)
        table_console().print(trials_table(trials, f"study {study_cfg.name}", best.number if best else None))
        summary: dict[str, Any] = {
            "study": study_cfg.name,
            "storage": describe_storage(study_cfg.storage, study_dir),
            "resumed": resumed or bool(done_before),
            "trials": {s.name: sum(t.state == s for t in trials) for s in studies.FINISHED},
            "best": studies.trial_row(best) if best else None,
            "baseline": studies.trial_row(studies.baseline_trial(study)) if studies.baseline_trial(study) else None,
            "provenance": provenance(
                task.name, cfg.run.seed, torch_device, task.split, task.path, models.forward_paths()
            ),
            "partial": bool(stop.requested),
            "interrupted": stop.signal_name if stop.requested else None,
        }
        if stop.requested:
            console.print(f"[yellow]interrupted:[/] the study is saved; rerun the same command to resume ({study_dir})")
            summary["timings"] = {**timings, "total_s": time.monotonic() - started}
            write_atomic(study_dir / SUMMARY_FILE, dumps_strict(summary))
            return summary
        agent = agent_config(cfg.agent)
        if record is not None and tuner.measure_drift and record.drift is None:
            t0 = time.monotonic()
            work = Workload(
                models,
                instances,
                environment,
                agent,
                repeats=cfg.run.repeats,
                warmup=False,
                plain=base,
                model_name=cfg.model.name,
                server=server,
            )
            again = Comparison(work, None, study_dir / "drift")
            end = [o.baseline for o in until_stopped(again, stop) if o.baseline is not None]
            if not stop.requested:
                record.drift = drift(record, end)
                record.save(study_dir)
            timings["drift_s"] = time.monotonic() - t0
        summary["drift"] = record.drift if record is not None else None
        confirmation = None
        if best is not None and tuner.confirm and not stop.requested:
            confirmation = _confirmation(
                cfg, best, models, held_out, environment, agent, study_dir, stop, console, server
            )
            timings["confirm_s"] = confirmation.pop("_seconds", 0.0)
            summary["confirmation"] = confirmation
        elif best is None:
            console.print("[yellow]no feasible candidate[/]: every trial broke a constraint or failed (see the table)")
        if best is not None:
            from export import ExportRecord, write_exports

            engine = EngineConfig(**best.user_attrs["engine"])
            composed = runner_config(cfg, engine)
            record_x = ExportRecord(
                engine=engine,
                model_name=cfg.model.name,
                # the GGUFs a llama-server study measured, else the folders (the export names what to convert)
                target=str(server.target_gguf) if server else cfg.model.target,
                draft=(str(server.draft_gguf) if server and server.draft_gguf else cfg.model.draft)
                if drafter_needs(engine.drafter).draft_model
                else None,
                mtp=(str(server.mtp_gguf) if server and server.mtp_gguf else cfg.model.get("mtp"))
                if drafter_needs(engine.drafter).mtp
                else None,
                hardware=cfg.hardware.name,
                measured_on=torch_device.type,
                context=int(best.user_attrs.get("largest_context") or 0),
                confirmed=confirmation or {},
                cost_ratios=best.user_attrs.get("cost_ratios"),
                composed_config=composed,
            )
            summary["exports"] = [str(p) for p in write_exports(study_dir / "best", record_x)]
        plots = save_study_plots(trials, best, memory.ceiling_bytes, study_dir)
        timings["total_s"] = time.monotonic() - started
        summary["timings"] = timings
        summary_path = study_dir / SUMMARY_FILE
        write_atomic(summary_path, dumps_strict(summary))
        _log_study(tracker, summary, plots, study_dir, console)
        _print_result(summary, best, study_dir, cfg, console)
    return summary


def _wide(console: Console) -> Console:
    """Progress and trial lines at the terminal's width, or a log-friendly one when not a terminal."""
    return console if console.is_terminal else Console(stderr=True, width=max(console.width, 160))


def _confirmation(
    cfg, best, models, held_out, environment, agent, study_dir, stop, console, server=None
) -> dict[str, Any]:
    """The best configuration against a live OFF on held-out tasks (reused when already confirmed)."""
    path = study_dir / CONFIRMATION_FILE
    if path.is_file():
        old = json.loads(path.read_text())
        if old.get("trial") == best.number and old.get("complete"):
            console.print(f"confirmation of trial {best.number} reused from {path}")
            return old
    tuner = cfg.tuner
    engine = EngineConfig(**best.user_attrs["engine"])
    console.print(
        f"confirming trial {best.number} ({engine.drafter}) on {cfg.task.name}/{tuner.confirm_split}: "
        f"{len(held_out)} task(s) x {tuner.confirm_repeats} repeat(s), OFF vs ON live"
    )
    t0 = time.monotonic()
    work = Workload(
        models,
        held_out,
        environment,
        agent,
        repeats=tuner.confirm_repeats,
        warmup=cfg.run.warmup,
        model_name=cfg.model.name,
        server=server,
    )
    comparison = Comparison(work, engine, study_dir / "confirm")
    result = confirm(comparison, until_stopped(comparison, stop), resamples=tuner.bootstrap_resamples, seed=0)
    result.update(trial=best.number, engine=asdict(engine), split=tuner.confirm_split)
    write_atomic(path, dumps_strict(result))
    result["_seconds"] = time.monotonic() - t0
    return result


def _log_study(tracker, summary, plots, study_dir, console) -> None:
    """Study figures, plots and files on the MLflow parent; a tracking failure never loses the results."""
    try:
        c = summary.get("confirmation") or {}
        d = summary.get("drift") or {}
        best = summary.get("best") or {}
        tracker.log_study(
            {
                "best_seconds_per_success": best.get("value"),
                "best_trial": best.get("number"),
                "confirmed_speedup": c.get("speedup"),
                "confirmed_speedup_low": (c.get("speedup_interval") or {}).get("low"),
                "confirmed_speedup_high": (c.get("speedup_interval") or {}).get("high"),
                "confirmed_regressions": len(c.get("regressions") or []) if c else None,
                "baseline_drift_pct": d.get("agent_time_pct"),
                "wall_s": summary["timings"].get("total_s"),
            },
            {"best_drafter": (best.get("params") or {}).get("drafter", "")},
        )
        files = [study_dir / n for n in (SUMMARY_FILE, studies.TRIALS_FILE, "baseline.json", CONFIRMATION_FILE)]
        tracker.log_artifacts([p for p in files if p.is_file()] + plots + [study_dir / "best"])
        tracker.finish("FINISHED")
    except Exception as exc:
        console.print(f"[red]MLflow logging failed:[/] {type(exc).__name__}: {exc} (results are in {study_dir})")


def _print_result(summary, best, study_dir: Path, cfg: DictConfig, console: Console) -> None:
    out = table_console()
    d = summary.get("drift") or {}
    if d.get("agent_time_pct") is not None:
        out.print(f"baseline drift: OFF agent time {d['agent_time_pct']:+.1f}% from the study's start to its end")
    if best is None:
        out.print("best: none feasible")
        return
    out.print(f"best: trial {best.number}, {best.params}, {best.value:.3f} s/success on the search split")
    c = summary.get("confirmation")
    if c:
        iv = c["speedup_interval"]
        reps = ", ".join("-" if v is None else f"{v:.2f}" for v in c["speedup_repeats"])
        pooled = f"{iv['pooled']:.2f}x" if iv.get("pooled") else "-"
        span = f"95% interval [{iv['low']:.2f}, {iv['high']:.2f}]" if iv.get("low") is not None else "no interval"
        speed = f"{c['speedup']:.2f}x" if c["speedup"] else "-"
        out.print(
            f"confirmed on {cfg.task.name}/{c['split']} ({c['tasks']} tasks x {c['repeats']} repeats): speedup "
            f"{speed} (medians over repeats; per repeat [{reps}]), pooled over tasks {pooled} ({span}, bootstrap "
            f"over tasks), regressions {len(c['regressions'])}, diverged {len(c['diverged_tasks'])}"
        )
    out.print(f"exports: {study_dir / 'best'}")
    uri = cfg.tracking.uri or default_uri(study_dir)
    if cfg.tracking.enabled:
        out.print(f"trials side by side: mlflow ui --backend-store-uri {uri}")


register_tune_configs()


@hydra.main(config_path=CONF_DIR, config_name="tune", version_base=None)
def main(cfg: DictConfig) -> None:
    """Hydra entry point; configuration and input problems exit 2 with a one-line message."""
    run_command(execute, cfg)


if __name__ == "__main__":
    main()
