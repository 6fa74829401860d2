"""The tuner: `python -m tuner.search hardware=rtx4060 task=swe-lite`.

Prepare once (tuner/setup.py: the config checked, tasks and models loaded), run the study's trials
(tuner/optimize.py: OFF recorded once, then candidates each measured paired with OFF inside the trial), and, as
the last worker of the study, finish it once (tuner/finish.py: each server's best configuration confirmed live
on held-out tasks, exported ON or OFF). One process, models loaded once.

Writes runs/<study.name>/: the storage (study.db by default), trials.jsonl, baseline.json (the recording),
summary.json, plots/, best/ (one folder per target and README.md), trials/ and confirm/ (trajectories). The
same command with the same study.name resumes. Ctrl-C / SIGTERM finishes the task in flight, records the trial
(re-queued on resume) and leaves a resumable study (exit 130 / 143); bad configuration or input: one line on
stderr, exit 2.
"""

from __future__ import annotations

import time
from typing import Any

import hydra
import optuna
from omegaconf import DictConfig
from rich.console import Console

from common.files import write_atomic
from export.files import dumps_strict
from runners.cli import CONF_DIR, run_command
from runners.interrupt import GracefulStop
from runners.report import table_console
from tuner import study as studies
from tuner.claims import claim, others_running, release
from tuner.config import register_tune_configs
from tuner.finish import SUMMARY_FILE, finish, off_export_record
from tuner.levels import write_levels
from tuner.optimize import run_study
from tuner.projection import budget_stop
from tuner.report import trials_table
from tuner.setup import TuneSetup, at_level, prepare
from tuner.tracking import make_study_tracker


def execute(cfg: DictConfig, console: Console | None = None) -> dict[str, Any]:
    """Run (or resume) the study of every tuner.concurrency level; the last worker finishes each. Returns the summary.

    One level (the default [1]): that study's summary, as always. Several: one study per level, in order
    (tuner/setup.py `at_level`), then runs/<name>/levels/ (tuner/levels.py); the summary is the lowest level's
    with `levels` holding every level's.
    """
    console = console or _wide(Console(stderr=True))
    started = time.monotonic()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own lines say what happens; keep Optuna's warnings
    with GracefulStop(console) as stop:
        with stop.loading():
            setup = prepare(cfg)
        try:
            return _levels(setup, stop, console, started)
        finally:
            setup.close()  # the servers kept across trials (OFF's), whatever ended the run


def _levels(setup: TuneSetup, stop: GracefulStop, console: Console, started: float) -> dict[str, Any]:
    """Each level's study in order, then the levels' export when there are several (execute's docstring)."""
    levels = setup.tuner.levels
    summaries: dict[int, dict[str, Any]] = {}
    for level in levels:
        at = at_level(setup, level)
        if len(levels) > 1:
            console.print(f"[bold]{level} agent(s) at once[/]: study {at.study.name} ({at.study_dir})")
        summaries[level] = _study(at, stop, console, started)
        if stop.requested or "winners" not in summaries[level]:
            break  # interrupted, or another worker finishes this level: the levels' answer is not complete
    if len(levels) == 1:
        return summaries[levels[0]]
    if len(summaries) < len(levels) or stop.requested:  # the levels' answer is incomplete: no levels/ export
        return {**summaries[levels[0]], "levels": {str(n): s for n, s in summaries.items()}}
    written = write_levels(setup, summaries, off_export_record(at_level(setup, levels[0])))
    console.print(f"levels: {written['readme']} (the best configuration at each load, per target)")
    summary = {
        **summaries[levels[0]],
        "levels": {str(n): s for n, s in summaries.items()},
        "levels_export": written,
    }
    write_atomic(setup.study_dir / SUMMARY_FILE, dumps_strict(summary))
    return summary


def _study(setup: TuneSetup, stop: GracefulStop, console: Console, started: float) -> dict[str, Any]:
    """One level's study: its trials, then (as the last worker) its confirmation and export."""
    t = setup.tracking
    tracker = make_study_tracker(t.enabled, t.uri, t.experiment, setup.study_dir)
    run = run_study(setup, stop=stop, console=console, tracker=tracker)
    summary: dict[str, Any] = {"study": setup.study.name, "resumed": run.resumed}
    if stop.requested:
        console.print(
            f"[yellow]interrupted:[/] the study is saved; rerun the same command to resume ({setup.study_dir})"
        )
        return _partial(setup, run, stop, summary, started)
    running = others_running(run.study)
    spent = run.exhausted or studies.budget_left(run.study, setup.tuner.trials) == 0 or budget_stop(run.study)
    if running or not spent:
        trials = run.study.get_trials(deepcopy=False)
        table_console().print(trials_table(trials, f"study {setup.study.name} (this worker is done)"))
        who = ", ".join(f"{r.number} on {r.user_attrs.get('host', '?')}" for r in running)
        console.print(
            f"other worker(s) still run trial(s) {who or '-'}: the last one to finish confirms and exports "
            f"(or run: python -m tuner.finish study.name={setup.study.name} with this command's overrides)"
        )
        return {**summary, "finished_by": "another worker"}
    token = claim(run.study, run.storage)
    if token is None:
        console.print("another worker is finishing the study (confirmation and export); nothing left to do here")
        return {**summary, "finished_by": "another worker"}
    try:
        summary = {**finish(setup, run.study, stop=stop, console=console, tracker=tracker), **summary}
    finally:
        release(run.storage, token, "finished the study" if not stop.requested else "finish interrupted")
    summary["timings"] = {
        **summary.get("timings", {}),
        "search_s": run.search_s,
        "total_s": time.monotonic() - started,
    }
    write_atomic(setup.study_dir / SUMMARY_FILE, dumps_strict(summary))
    return summary


def _partial(setup, run, stop, summary: dict[str, Any], started: float) -> dict[str, Any]:
    """An interrupted study: the trials so far in summary.json, partial."""
    summary.update(
        partial=True,
        interrupted=stop.signal_name,
        trials={s.name: sum(t.state == s for t in run.study.get_trials(deepcopy=False)) for s in studies.FINISHED},
        timings={"search_s": run.search_s, "total_s": time.monotonic() - started},
    )
    write_atomic(setup.study_dir / SUMMARY_FILE, dumps_strict(summary))
    return summary


def _wide(console: Console) -> Console:
    """Progress and trial lines at the terminal's width, or a log-friendly one when not a terminal."""
    return console if console.is_terminal else Console(stderr=True, width=max(console.width, 160))


register_tune_configs()


@hydra.main(config_path=CONF_DIR, config_name="tune", version_base=None)
def main(cfg: DictConfig) -> None:
    """Hydra entry point; configuration and input problems exit 2 with a one-line message."""
    run_command(execute, cfg)


if __name__ == "__main__":
    main()
