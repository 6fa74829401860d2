"""Run (or resume) the study's trials: open the storage, record OFF once, then candidates until the budget is spent.

One worker or several (journal or RDB storage, the same study.name): each runs trials until the study's shared
budget of candidates is spent, the space is exhausted (every point of a finite space measured) or a stop is
asked. Trials of processes killed on this host are failed and retried; interrupted ones are re-queued.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial
from rich.console import Console

from common.errors import ConfigError
from tuner import peers, recording
from tuner import study as studies
from tuner.baseline import BaselineRecord
from tuner.objective import Objective
from tuner.points import study_size
from tuner.projection import BudgetStop
from tuner.report import StudyProgress
from tuner.setup import TuneSetup
from tuner.storage import open_storage

MEASUREMENT = "paired-v1"  # in the fingerprint: studies measured against one stored OFF do not resume as paired


@dataclass
class StudyRun:
    """What running the trials left: the study, its storage, the recording, and whether it was resumed."""

    study: optuna.Study
    storage: optuna.storages.BaseStorage
    baseline: BaselineRecord | None
    resumed: bool
    exhausted: bool
    search_s: float


def max_asks(trials: int) -> int:
    """How many trials a worker may ask for to measure `trials`: duplicates reuse a value and do not count toward
    the budget, so the loop asks until the shared budget says stop, bounded against a sampler stuck on measured
    points."""
    return trials * 4 + 8


def remaining(started: float, timeout_s: float | None) -> float | None:
    """Seconds of tuner.timeout_s left since `started` (0 when spent; None: no limit)."""
    return None if timeout_s is None else max(timeout_s - (time.monotonic() - started), 0.0)


# Keys a study made before them lacks: written in on resume, not compared (an older study's worker recorded none).
ADDED_KEYS = ("model_sha256", "suite_sha256")
RETIRED_KEYS = ("model",)  # the model's path: its content (model_sha256) is what must match, wherever it lies
WHAT = {"model_sha256": "model files", "suite_sha256": "task suite (the search and held-out tasks' contents)"}


def check_same_study(study: optuna.Study, fingerprint: dict[str, Any], name: str) -> None:
    """A resumed study, or another worker of it, must search the same tasks and space with the same model;
    otherwise its trials are not comparable. One line saying what differs."""
    recorded = study.user_attrs.get("fingerprint")
    if recorded is None:
        study.set_user_attr("fingerprint", fingerprint)
        return
    recorded = {k: v for k, v in recorded.items() if k not in RETIRED_KEYS}
    missing = [k for k in ADDED_KEYS if k not in recorded]
    differs = sorted(
        k for k in set(fingerprint) | set(recorded) if k not in missing and recorded.get(k) != fingerprint.get(k)
    )
    contents = [k for k in differs if k in WHAT]
    if contents:
        what = " and ".join(
            f"{WHAT[k]} (sha256 {fingerprint.get(k, '-')[:12]}, the study's {recorded[k][:12]})" for k in contents
        )
        raise ConfigError(
            f"study {name!r}: this worker's {what} differ; every worker of a study must run the same model and tasks "
            "(copy them over, or choose another study.name)"
        )
    if differs:
        raise ConfigError(
            f"study {name!r} was created with other {', '.join(differs)}; keep them or choose another study.name"
        )
    if missing:  # an older study: from now on its workers are checked on content too
        study.set_user_attr("fingerprint", {**study.user_attrs["fingerprint"], **{k: fingerprint[k] for k in missing}})


def run_study(setup: TuneSetup, *, stop, console: Console, tracker: Any) -> StudyRun:
    """Open or resume the study and run trials until the budget is spent (module docstring)."""
    s, t = setup.study, setup.tuner
    storage = open_storage(s.storage, setup.study_dir, heartbeat_interval=s.heartbeat_interval, max_retry=s.max_retry)
    study = optuna.create_study(
        study_name=s.name,
        storage=storage,
        load_if_exists=True,
        direction="minimize",
        sampler=studies.make_sampler(s.sampler, s.seed, s.startup_trials),
        pruner=studies.make_pruner(s.pruner, s.prune_p, s.prune_startup_steps, s.prune_reduction),
    )
    check_same_study(study, {**setup.fingerprint, "measurement": MEASUREMENT}, s.name)
    record = recording.fetch(study, setup.study_dir)  # the storage carries it to a worker with another run root
    queued = studies.ensure_baseline_queued(study) if record is None else False
    if record is None and not queued:
        console.print("another worker is recording the baseline (trial 0); waiting for it")
        record = recording.wait(study, setup.study_dir, lambda: stop.requested)
    killed = studies.fail_dead_trials(study, storage, s.max_retry)
    requeued = studies.requeue_interrupted(study)
    resumed = tracker.open_study(
        s.name,
        {k: v for k, v in setup.composed.items() if k != "space"},
        {"hardware": setup.names["hardware"], "model": setup.names["model"], "task": setup.names["task"]},
    )
    done_before = len([x for x in study.get_trials(deepcopy=False) if studies.counts_toward_budget(x)])
    for drafter, why in setup.space.left_out.items():
        console.print(f"[yellow]note:[/] {'drafter ' if '=' not in drafter else ''}{drafter} left out: {why}")
    w = setup.workload
    console.print(
        f"study {s.name!r} ({setup.storage_description}): space {setup.space.name!r} {sorted(setup.space.drafters)}, "
        f"{len(w.instances)} search task(s) x {w.repeats} repeat(s) on {setup.names['task']}/{setup.names['split']}, "
        f"budget {t.trials} trial(s), measured {t.measure} (paired with OFF inside each trial), clock {t.clock}, "
        f"sampler {s.sampler}"
        + (f"; resuming with {done_before} finished trial(s)" if done_before else "")
        + (f"; re-queued interrupted trial(s) {requeued}" if requeued else "")
        + (f"; retrying trial(s) {killed} of a killed process" if killed else "")
        + ("; recording reused from baseline.json" if record is not None else "")
    )
    if w.models.target.device.type != "cuda" and setup.server is None:  # a server's build: llama_server_setup's note
        console.print(
            f"[yellow]note:[/] no CUDA device: timings are measured on the CPU; hardware={setup.names['hardware']} "
            f"sets only the VRAM ceiling ({setup.names['vram_gib']} GiB) checked against the memory model."
        )
    size = study_size(setup.space, setup.base, len(setup.choices.targets), len(setup.choices.cache_types))
    progress = StudyProgress(console, t.trials + (1 if record is None else 0), setup.progress)
    exhausted = False

    def finished(study: optuna.Study, trial: FrozenTrial) -> None:
        nonlocal exhausted
        studies.write_trials(study, setup.study_dir)
        try:
            tracker.log_trial(trial)
        except Exception as exc:  # MLflow trouble never costs a trial: trials.jsonl has it
            console.print(f"[red]MLflow logging failed:[/] {type(exc).__name__}: {exc}")
        progress.trial_done(trial)
        if size is not None and len(studies.measured_keys(study)) >= size:
            exhausted = True
            console.print(f"space exhausted: all {size} point(s) measured")
        if stop.requested or exhausted or studies.budget_left(study, t.trials) == 0:
            study.stop()

    objective = Objective(setup, stop=stop, baseline=record, on_task=progress.task_done)
    budget = BudgetStop.for_setup(setup, recording=lambda: objective.baseline, console=console)
    budget.announce(study)  # a resumed study's recording exists: the projection now; else after trial 0
    started = time.monotonic()
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failed trial gets our own line, not a traceback
    try:
        with progress:
            left = studies.budget_left(study, t.trials) + (1 if record is None else 0)
            while (
                left
                and not stop.requested
                and not (size is not None and len(studies.measured_keys(study)) >= size)
                and budget.allows_start(study)
            ):
                study.optimize(
                    objective,
                    n_trials=max_asks(left),
                    timeout=remaining(started, t.timeout_s),
                    catch=(Exception,),
                    callbacks=[finished, budget],
                )
                # others may still run trials: a dead worker's is failed (and retried here), a live one's is left to
                # it (the last worker to end finishes); with none left, run what the budget still has
                if stop.requested or remaining(started, t.timeout_s) == 0:
                    break
                if not peers.wait_for_others(
                    study, storage, lambda: stop.requested, console.print, max_retry=s.max_retry
                ):
                    break
                before, left = left, studies.budget_left(study, t.trials) + (1 if objective.baseline is None else 0)
                if left >= before and not studies.queued(study):  # no progress and nothing queued: a stuck sampler
                    break
    except KeyboardInterrupt:
        stop.count = max(stop.count, 1)
    finally:
        optuna.logging.set_verbosity(verbosity)
        studies.write_trials(study, setup.study_dir)
    return StudyRun(
        study=study,
        storage=storage,
        baseline=objective.baseline,
        resumed=resumed or bool(done_before),
        exhausted=exhausted,
        search_s=time.monotonic() - started,
    )
