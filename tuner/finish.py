"""Finishing a study, once: per-target winners, their live confirmation, the OFF-or-ON decision, best/, summary.

    python -m tuner.finish study.name=NAME [the study's other overrides]

`python -m tuner.search` finishes the study itself when it is the last worker (no other worker's trial still
running and the budget spent). Exactly one process finishes at a time, on any storage: the one that takes the
study's finish claim (tuner/claims.py); the others say so and leave. Finishing again (a resumed, already finished
study) redoes only what is missing: confirmations are reused from their files.

What it does: picks the engine's best and each server's best feasible configuration (tuner/winners.py),
confirms each distinct one live against OFF on the held-out tasks, decides ON or OFF per target, writes best/
(export/per_server.py), the study's plots, summary.json and the MLflow parent's figures, and prints them.
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hydra
import optuna
from omegaconf import DictConfig
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console

from common.errors import ConfigError
from common.files import write_atomic
from engine.drafters import drafter_needs
from engine.engine import EngineConfig
from export.files import dumps_strict
from export.fit import server_names
from export.per_server import folder_name, write_index, write_target
from export.record import ExportRecord
from runners.cli import CONF_DIR, run_command
from runners.compare import Comparison
from runners.interrupt import GracefulStop, until_stopped
from runners.provenance import provenance
from runners.report import table_console
from runners.tracking import finish_or_report
from serving.llama_binary import LlamaServerMissing, find_llama_server
from tuner import recording, server_choice
from tuner import study as studies
from tuner.claims import claim, others_running, release
from tuner.config import register_tune_configs
from tuner.confirm import confirm
from tuner.export_ggufs import bundled_ggufs, served_facts
from tuner.plots import save_study_plots
from tuner.points import study_size
from tuner.projection import coverage, coverage_line, versus_actual, versus_line
from tuner.report import trials_table
from tuner.setup import TuneSetup, at_level, prepare
from tuner.storage import open_storage
from tuner.tracking import make_study_tracker
from tuner.winners import SPECTUNE, Decision, decide, pick_winners

SUMMARY_FILE = "summary.json"
CONFIRM_DIR = "confirm"
BEST_DIR = "best"


# ---------------------------------------------------------------- the figures


def drift(trials: list[FrozenTrial]) -> dict[str, Any] | None:
    """How OFF moved during the study, read from the OFF each trial measured for itself (no extra run).

    Only complete trials measured the same way are compared: the same tasks (a pruned trial ran fewer), and
    replay or live alike (live OFF time holds the agent's tool runs too).
    """
    rows = [
        (t.number, float(t.user_attrs["off_seconds_per_success"]), t.user_attrs.get("host"), t.user_attrs["measure"])
        for t in sorted(trials, key=lambda t: t.number)
        if studies.role(t) == "candidate"
        and t.state == TrialState.COMPLETE
        and t.user_attrs.get("tasks_run") == t.user_attrs.get("tasks_total")  # the same tasks in every row
        and not t.user_attrs.get("reused")
        and t.user_attrs.get("off_seconds_per_success")
        and t.user_attrs.get("measure") in ("replay", "live")
    ]
    if not rows:
        return None
    measures = [r[3] for r in rows]
    measure = max(set(measures), key=measures.count)
    rows = [r for r in rows if r[3] == measure]
    values = [r[1] for r in rows]
    first, last = values[0], values[-1]
    chosen = {r[0] for r in rows}
    generation: dict[str, dict[str, float]] = {}  # OFF's own generation time per trial, on each clock
    for t in sorted(trials, key=lambda t: t.number):
        if t.number in chosen:
            for clock, seconds in ((t.user_attrs.get("generation_s") or {}).get("baseline") or {}).items():
                generation.setdefault(clock, {"first": seconds})["last"] = seconds
    for g in generation.values():
        g["pct"] = 100.0 * (g["last"] / g["first"] - 1.0) if g["first"] else None
    return {
        "measure": measure,
        "trials": len(rows),
        "first": first,
        "last": last,
        "pct": 100.0 * (last / first - 1.0),
        "min": min(values),
        "max": max(values),
        "median": statistics.median(values),
        "by_trial": [[n, v, h] for n, v, h, _ in rows],
        "generation": generation,
    }


def confirmation_for(setup: TuneSetup, trial: FrozenTrial, stop: GracefulStop, console: Console) -> dict[str, Any]:
    """The trial's configuration against a live OFF on the held-out tasks (reused when already complete)."""
    folder = setup.study_dir / CONFIRM_DIR / f"{trial.number:04d}"
    path = folder / "confirmation.json"
    engine = EngineConfig(**trial.user_attrs["engine"])
    if path.is_file():
        old = json.loads(path.read_text())
        if old.get("complete") and old.get("engine") == asdict(engine):
            console.print(f"confirmation of trial {trial.number} reused from {path}")
            return old
    t = setup.tuner
    console.print(
        f"confirming trial {trial.number} ({engine.drafter}) on {setup.names['task']}/{t.confirm_split}: "
        f"{len(setup.held_out)} task(s) x {t.confirm_repeats} repeat(s), OFF and ON live, taking turns"
    )
    started = time.monotonic()
    workload = setup.workload.with_(instances=setup.held_out, repeats=t.confirm_repeats)
    choice = server_choice.of_trial(trial.user_attrs)
    if server_choice.changes_numbers(choice, setup.choices):  # ON on its own file / KV type, OFF on the reference
        assert choice is not None and workload.server is not None
        on = server_choice.settings_for(workload.server, choice, engine)
        workload = workload.with_(server=on, baseline_server=workload.server)
    comparison = Comparison(workload, engine, folder)
    result = confirm(comparison, until_stopped(comparison, stop), resamples=t.bootstrap_resamples, seed=0)
    result.update(trial=trial.number, engine=asdict(engine), split=t.confirm_split)
    result["seconds"] = time.monotonic() - started
    write_atomic(path, dumps_strict(result))
    return result


def server_binary(setup: TuneSetup) -> str | None:
    """The llama-server run.sh starts: the one a llama-server study measured, else the one found here, else None."""
    if setup.server is not None:
        return str(setup.server.binary.path)
    try:
        return str(find_llama_server().path)
    except LlamaServerMissing:
        return None  # run.sh then names llama-server on PATH and says how to build the pinned one


def export_record(setup: TuneSetup, trial: FrozenTrial, confirmation: dict[str, Any] | None) -> ExportRecord:
    """What the exporters need about a winning trial."""
    engine = EngineConfig(**trial.user_attrs["engine"])
    needs = drafter_needs(engine.drafter)
    server, paths = setup.server, setup.model_paths
    draft = (str(server.draft_gguf) if server and server.draft_gguf else paths["draft"]) if needs.draft_model else None
    mtp = (str(server.mtp_gguf) if server and server.mtp_gguf else paths["mtp"]) if needs.mtp else None
    choice = server_choice.of_trial(trial.user_attrs)
    if choice is not None and needs.mtp:
        mtp = choice.target  # the trial's own file holds the MTP layers it ran
    # the head's folder for vLLM and SGLang, and the GGUF a llama-server study measured (if any) for llama-server
    head_gguf = getattr(server, "eagle3_gguf", None) if needs.eagle3 else None
    dflash_gguf = getattr(server, "dflash_gguf", None) if needs.server_draft else None
    return ExportRecord(
        engine=engine,
        model_name=setup.names["model"],
        # the GGUFs a llama-server study measured (the trial's own choice), else the folders (the export names
        # what to convert)
        target=(choice.target if choice else str(server.target_gguf)) if server else str(paths["target"]),
        draft=draft,
        mtp=mtp,
        eagle3=paths.get("eagle3") if needs.eagle3 else None,
        eagle3_gguf=str(head_gguf) if head_gguf else None,
        dflash_gguf=str(dflash_gguf) if dflash_gguf else None,
        hardware=setup.names["hardware"],
        measured_on=measured_on(setup),
        context=int(trial.user_attrs.get("largest_context") or 0),
        confirmed=confirmation or {},
        cost_ratios=trial.user_attrs.get("cost_ratios"),
        composed_config=setup.runner_config(engine, server_choice.of_trial(trial.user_attrs)),
        concurrency=setup.tuner.concurrency,
        server_binary=server_binary(setup),
        **export_files(setup, engine, trial),
    )


def measured_on(setup: TuneSetup) -> str:
    """Where the timings were taken: the llama-server build's backend (cpu | cuda), else the engine's device."""
    if setup.server is not None and setup.server.binary.backend:
        return setup.server.binary.backend
    return setup.workload.models.target.device.type


def export_files(setup: TuneSetup, engine: EngineConfig, trial: FrozenTrial | None = None) -> dict[str, Any]:
    """The GGUF facts a llama-server study measured (the trial's own file and KV type when it chose them), or the
    bundled folders' GGUFs made for a built-in one."""
    if setup.server is not None:
        choice = server_choice.of_trial(trial.user_attrs) if trial is not None else None
        if choice is None:
            return served_facts(setup.server)
        facts = served_facts(server_choice.settings_for(setup.server, choice, engine))
        if server_choice.changes_numbers(choice, setup.choices):
            reference = setup.choices.reference
            facts["reference"] = f"{Path(reference.target).name}, KV {reference.cache_type}"
        return facts
    return {"gguf_files": bundled_ggufs(engine, setup.model_paths)}


def off_export_record(setup: TuneSetup) -> ExportRecord:
    """The export of speculation off, for a target with no feasible winner."""
    paths = setup.model_paths
    return ExportRecord(
        engine=setup.base,
        model_name=setup.names["model"],
        target=str(setup.server.target_gguf) if setup.server else str(paths["target"]),
        draft=None,
        hardware=setup.names["hardware"],
        measured_on=measured_on(setup),
        context=0,
        confirmed={},
        cost_ratios=None,
        composed_config=setup.runner_config(setup.base),
        concurrency=setup.tuner.concurrency,
        server_binary=server_binary(setup),
        **export_files(setup, setup.base),
    )


# ---------------------------------------------------------------- the finish


def finish(
    setup: TuneSetup, study: optuna.Study, *, stop: GracefulStop, console: Console, tracker: Any
) -> dict[str, Any]:
    """Winners, confirmations, decisions, best/, plots and summary.json (module docstring); returns the summary."""
    started = time.monotonic()
    trials = study.get_trials(deepcopy=False)
    servers = setup.tuner.serve or server_names()
    winners = pick_winners(trials, servers)
    table_console().print(trials_table(trials, f"study {setup.study.name}", winners[SPECTUNE].trial))
    confirmations: dict[int, dict[str, Any]] = {}
    if setup.tuner.confirm:
        # the engine's best first, then each server's; one confirmation per distinct trial
        for winner in winners.values():
            if winner.trial is not None and winner.trial.number not in confirmations and not stop.requested:
                confirmations[winner.trial.number] = confirmation_for(setup, winner.trial, stop, console)
    decisions: dict[str, Decision] = {}
    for target, winner in winners.items():
        confirmation = confirmations.get(winner.trial.number) if winner.trial is not None else None
        if confirmation is not None and not confirmation.get("complete"):
            confirmation = None  # interrupted: no verdict from half a confirmation
        decisions[target] = decide(
            winner, confirmation, min_speedup=setup.tuner.min_speedup, max_regressions=setup.tuner.max_regressions
        )
    size = study_size(setup.space, setup.base, len(setup.choices.targets), len(setup.choices.cache_types))
    covered = coverage(study, size, setup.tuner.trials)
    exports = [] if stop.requested else _write_best(setup, winners, decisions, confirmations, covered)
    best = winners[SPECTUNE].trial
    plots = save_study_plots(trials, best, setup.memory.ceiling_bytes, setup.study_dir)
    baseline = studies.baseline_trial(study)
    versus = versus_actual(study)  # the projection against the wall time to here, the end of the export
    timings: dict[str, Any] = {"finish_s": time.monotonic() - started}
    if versus is not None:
        timings.update(
            projected_s=versus["projected_s"], actual_s=versus["actual_s"], projection_error_pct=versus["error_pct"]
        )
    summary: dict[str, Any] = {
        "study": setup.study.name,
        "storage": setup.storage_description,
        "trials": {s.name: sum(t.state == s and studies.role(t) != "finish" for t in trials) for s in studies.FINISHED},
        "best": studies.trial_row(best) if best else None,
        "baseline": studies.trial_row(baseline) if baseline else None,
        "winners": {
            target: {**d.to_dict(), "engine": w.trial.user_attrs["engine"] if w.trial is not None else None}
            for (target, d), w in zip(decisions.items(), winners.values(), strict=True)
        },
        "concurrency": setup.tuner.concurrency,
        "confirmations": {str(n): c for n, c in confirmations.items()},
        "drift": drift(trials),
        "exports": [str(p) for p in exports],
        "provenance": provenance(
            setup.names["task"],
            setup.base.seed,
            setup.workload.models.target.device,
            setup.names["split"],
            setup.names.get("task_path"),
            setup.workload.models.forward_paths(),
        ),
        "partial": bool(stop.requested),
        "interrupted": stop.signal_name if stop.requested else None,
        "coverage": covered,
        "projection": versus,
        "timings": timings,
    }
    write_atomic(setup.study_dir / SUMMARY_FILE, dumps_strict(summary))
    where = setup.study_dir
    finish_or_report(tracker, "FINISHED", console, lambda: _log(tracker, summary, plots, where), str(where))
    print_result(summary, setup, console, tracker)
    return summary


def _write_best(
    setup: TuneSetup,
    winners: dict,
    decisions: dict[str, Decision],
    confirmations: dict[int, dict],
    covered: dict[str, Any] | None = None,
) -> list[Path]:
    """best/ from scratch (written beside, then swapped in, so a reader never sees half of it)."""
    best_dir = setup.study_dir / BEST_DIR
    fresh = setup.study_dir / (BEST_DIR + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    paths: list[Path] = []
    rows = []
    for target, winner in winners.items():
        decision = decisions[target]
        record = None
        if winner.trial is not None:
            record = export_record(setup, winner.trial, confirmations.get(winner.trial.number))
        data = {**decision.to_dict(), "off_record": off_export_record(setup)}
        folder = folder_name(target)
        paths += write_target(fresh / folder, target, record, data, final_dir=best_dir / folder)
        rows.append(
            {
                "target": target,
                "engine": winner.trial.user_attrs["engine"] if winner.trial else None,
                "decision": decision.to_dict(),
            }
        )
    header = [
        f"Study `{setup.study.name}`: model `{setup.names['model']}`, hardware profile `{setup.names['hardware']}` "
        f"({setup.names['vram_gib']} GiB ceiling), timings on {measured_on(setup)}. "
        f"Speculation is exported ON only where the held-out confirmation's 95% interval lies above "
        f"{setup.tuner.min_speedup:g} (tuner.min_speedup).",
    ]
    if covered is not None:
        header += ["", coverage_line(covered)]  # a paragraph of its own
    paths.append(write_index(fresh, rows, header))
    old = setup.study_dir / (BEST_DIR + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if best_dir.exists():
        best_dir.rename(old)
    fresh.rename(best_dir)
    shutil.rmtree(old, ignore_errors=True)
    return [best_dir / p.relative_to(fresh) for p in paths]


def _log(tracker: Any, summary: dict[str, Any], plots: list[Path], study_dir: Path) -> None:
    """Study figures, plots and files on the MLflow parent (finish_or_report finishes it or reports a failure)."""
    best = summary.get("best") or {}
    d = summary.get("drift") or {}
    metrics: dict[str, Any] = {
        "best_seconds_per_success": best.get("value"),
        "best_trial": best.get("number"),
        "off_drift_pct": d.get("pct"),
    }
    tags: dict[str, Any] = {"best_drafter": (best.get("params") or {}).get("drafter", "")}
    for target, w in summary["winners"].items():
        name = folder_name(target).replace("-", "_")
        c = (w.get("confirmed") or {}).get("speedup_interval") or {}
        metrics[f"{name}_confirmed_speedup"] = c.get("pooled")
        metrics[f"{name}_confirmed_low"] = c.get("low")
        metrics[f"{name}_on"] = 1.0 if w["on"] else 0.0
        tags[f"{name}_export"] = "ON" if w["on"] else "OFF"
    tracker.log_study(metrics, tags)
    files = [study_dir / n for n in (SUMMARY_FILE, studies.TRIALS_FILE, "baseline.json")]
    tracker.log_artifacts([p for p in files if p.is_file()] + plots + [study_dir / BEST_DIR])


def _x(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}x"


def print_result(summary: dict[str, Any], setup: TuneSetup, console: Console, tracker: Any) -> None:
    """Drift, each target's winner and verdict, where best/ is, how to open MLflow."""
    out = table_console()
    d = summary.get("drift")
    if d:
        clocks = ", ".join(
            f"{clock} {g['pct']:+.1f}%" for clock, g in d.get("generation", {}).items() if g.get("pct") is not None
        )
        out.print(
            f"OFF inside the study ({d['measure']}, each trial's own OFF): first {d['first']:.3f}, last "
            f"{d['last']:.3f} s/success ({d['pct']:+.1f}%), range {d['min']:.3f}-{d['max']:.3f} over {d['trials']} "
            f"trial(s); its generation time first to last by clock: {clocks or '-'}"
        )
    for target, w in summary["winners"].items():
        s = w.get("search") or {}
        c = (w.get("confirmed") or {}).get("speedup_interval") or {}
        trial = "-" if w["trial"] is None else f"trial {w['trial']}"
        span = "" if c.get("low") is None else f" [{c['low']:.2f}, {c['high']:.2f}]"
        verdict = "[green]ON[/]" if w["on"] else "[yellow]OFF[/]"
        out.print(
            f"{target:<13} {trial:<10} search {_x(s.get('speedup'))}  confirmed {_x(c.get('pooled'))}{span}  "
            f"-> {verdict}: {w['reason']}"
        )
    if summary.get("coverage"):
        out.print(coverage_line(summary["coverage"]), markup=False, highlight=False)
    if summary.get("projection"):
        out.print(versus_line(summary["projection"]), markup=False, highlight=False)
    if summary["exports"]:
        out.print(f"exports: {setup.study_dir / BEST_DIR} (README.md: the table; one folder per target)")
    urls = tracker.view_urls()
    if setup.tracking.enabled:
        uri = setup.tracking.uri or f"sqlite:///{(Path(setup.study_dir).parent / 'mlflow.db').resolve()}"
        out.print(f"trials side by side: mlflow ui --backend-store-uri {uri}")
        for name, url in urls.items():
            out.print(f"  {name}: {url}")


# ---------------------------------------------------------------- python -m tuner.finish


def execute(cfg: DictConfig, console: Console | None = None) -> dict[str, Any]:
    """Finish the named study now (even with trials still running elsewhere: they are left out).

    A concurrency level's study: name its level, `tuner.concurrency=[4]` finishes `<study.name>-n4`.
    """
    console = console or Console(stderr=True)
    with GracefulStop(console) as stop:
        setup = prepare(cfg)
        try:
            return _finish_now(setup, stop, console)
        finally:
            setup.close()  # OFF's kept server


def _finish_now(setup: TuneSetup, stop: GracefulStop, console: Console) -> dict[str, Any]:
    """`execute` once the study's setup is loaded."""
    if len(setup.tuner.levels) != 1:
        raise ConfigError(
            f"tuner.concurrency={list(setup.tuner.levels)}: name the one level whose study to finish, e.g. "
            f"tuner.concurrency=[{setup.tuner.levels[-1]}]"
        )
    setup = at_level(setup, setup.tuner.levels[0])
    storage = open_storage(
        setup.study.storage,
        setup.study_dir,
        heartbeat_interval=setup.study.heartbeat_interval,
        max_retry=setup.study.max_retry,
    )
    try:
        study = optuna.load_study(study_name=setup.study.name, storage=storage)
    except KeyError:
        raise ConfigError(f"no study {setup.study.name!r} in {setup.storage_description}") from None
    if recording.fetch(study, setup.study_dir) is None:  # from the storage when another worker recorded it
        raise ConfigError(f"study {setup.study.name!r} has no recording yet (baseline.json): nothing to finish")
    running = others_running(study)
    if running:
        console.print(f"[yellow]note:[/] trial(s) {[t.number for t in running]} still running are left out")
    token = claim(study, storage)
    if token is None:
        raise ConfigError(f"another process is finishing study {setup.study.name!r} right now")
    tracker = make_study_tracker(setup.tracking.enabled, setup.tracking.uri, setup.tracking.experiment, setup.study_dir)
    tracker.open_study(setup.study.name, {}, {"hardware": setup.names["hardware"], "model": setup.names["model"]})
    try:
        summary = finish(setup, study, stop=stop, console=console, tracker=tracker)
    finally:
        release(storage, token, "finished the study" if not stop.requested else "finish interrupted")
    return summary


register_tune_configs()


@hydra.main(config_path=CONF_DIR, config_name="tune", version_base=None)
def main(cfg: DictConfig) -> None:
    """Hydra entry point; configuration and input problems exit 2 with a one-line message."""
    run_command(execute, cfg)


if __name__ == "__main__":
    main()
