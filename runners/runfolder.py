"""The run folder runs/<run.name>/: refuse to mix two runs in it, resume a run, or replace it.

A folder holds a run when it has any of the files a run writes (summary.json, per_task.jsonl,
repeats.jsonl, eval.json, predictions, trajectories/). Reusing its name then needs one of:

- `run.resume=true`: keep the task runs recorded in repeats.jsonl (a task counts when all its sides
  are there), run the rest, and write one summary of all of them. The recorded configuration must
  equal this one (except run.name/root/progress/resume/overwrite and tracking), else it is refused
  naming the first keys that differ. Resuming a folder with no run in it simply starts the run.
- `run.overwrite=true`: delete the run's own files (nothing else in the folder) and start afresh.

Neither: exit 2 with one line naming both. The check (`plan`) reads only; nothing is written or
deleted (`Plan.claim`) before the command's configuration, suite and models have all loaded, so a
command that fails leaves an existing folder as it was.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from common.errors import ConfigError
from common.files import write_atomic
from runners.interrupt import GracefulStop, until_stopped
from runners.outcomes import SideRun, TaskOutcome
from runners.outputs import PER_TASK, RAW, SUMMARY, append_outcome, read_raw_rows, write_raw
from runners.plots import ACCEPTANCE_PNG, TASK_TIMES_PNG
from runners.report import RunProgress
from tasks.schema import Instance

EVAL = "eval.json"
CONFIG_DIR = "hydra"  # the composed config, as Hydra would save it (`hydra.output_subdir`)
RUN_FILES = (SUMMARY, PER_TASK, RAW, EVAL)
RUN_GLOBS = ("predictions*.jsonl",)
RUN_DIRS = ("trajectories",)
PLOTS = (ACCEPTANCE_PNG, TASK_TIMES_PNG)
# Keys that may differ between a run and its resumption: where it is written and how it is shown.
NOT_COMPARED = ("run.name", "run.root", "run.resume", "run.overwrite", "run.progress", "tracking")


class RunFolderError(ConfigError):
    """The run folder cannot be used as asked (exit 2, one line)."""


def run_files(out_dir: Path) -> list[str]:
    """Names of the run outputs present in `out_dir` (empty: no run there)."""
    if not out_dir.is_dir():
        return []
    found = [name for name in RUN_FILES if (out_dir / name).exists()]
    for pattern in RUN_GLOBS:
        found += sorted(p.name for p in out_dir.glob(pattern))
    found += [f"{name}/" for name in RUN_DIRS if (out_dir / name).is_dir()]
    return found


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict) and data:
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: data}


def config_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`key: recorded -> current` for every compared key that differs (sorted)."""
    a, b = _flat(recorded), _flat(current)

    def compared(key: str) -> bool:
        return not any(key == skip or key.startswith(skip + ".") for skip in NOT_COMPARED)

    missing = object()
    return [
        f"{key}: {a.get(key, '(absent)')!r} -> {b.get(key, '(absent)')!r}"
        for key in sorted(k for k in a.keys() | b.keys() if compared(k))
        if a.get(key, missing) != b.get(key, missing)
    ]


def _recorded_config(out_dir: Path) -> tuple[dict[str, Any] | None, Path | None]:
    """The configuration the run in `out_dir` was made with, and the file it came from."""
    for name in (SUMMARY, EVAL):
        path = out_dir / name
        if path.is_file():
            try:
                data = json.loads(path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise RunFolderError(
                    f"cannot resume: {path} is not valid JSON ({exc}); use run.overwrite=true"
                ) from exc
            if isinstance(data, dict) and isinstance(data.get("config"), dict):
                return data["config"], path
    path = out_dir / CONFIG_DIR / "config.yaml"
    if path.is_file():
        try:
            data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        except Exception as exc:  # a damaged YAML file: the message says which
            raise RunFolderError(f"cannot resume: {path} cannot be read ({exc}); use run.overwrite=true") from exc
        if isinstance(data, dict):
            return data, path
    return None, None


@dataclass
class Plan:
    """What a command does with its run folder: start, resume (with the recorded side runs) or overwrite."""

    out_dir: Path
    mode: str  # new | resume | overwrite
    recorded: list[SideRun] = field(default_factory=list)

    def finished(self, instances: list[Instance], sides: tuple[str, ...]) -> list[TaskOutcome]:
        """Recorded task runs of these instances with every side in `sides`, in run order."""
        index = {i.instance_id: n for n, i in enumerate(instances)}
        by_key: dict[tuple[str, int], dict[str, SideRun]] = {}
        for run in self.recorded:
            if run.instance_id in index:
                by_key.setdefault((run.instance_id, run.repeat), {})[run.side] = run
        done = [
            TaskOutcome(iid, index[iid], repeat, runs.get("baseline"), runs.get("candidate"))
            for (iid, repeat), runs in by_key.items()
            if all(side in runs for side in sides)
        ]
        return sorted(done, key=lambda o: (o.repeat, o.index))

    def claim(self, cfg: DictConfig, finished: list[TaskOutcome]) -> None:
        """Make the folder this run's: delete an overwritten run, keep only finished rows, save the config."""
        if self.mode == "overwrite":
            remove_run(self.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.mode == "resume":
            write_raw(self.out_dir, finished)  # drops a torn last line and tasks with a side missing
        else:
            (self.out_dir / RAW).unlink(missing_ok=True)
        save_config(self.out_dir, cfg)


def plan(out_dir: Path, cfg: DictConfig, *, eval_run: bool = False) -> Plan:
    """Decide, reading only, what to do with `out_dir`; RunFolderError when the folder cannot be used."""
    resume, overwrite = bool(cfg.run.resume), bool(cfg.run.overwrite)
    if resume and overwrite:
        raise RunFolderError("run.resume=true and run.overwrite=true exclude each other; pass one of them")
    if out_dir.exists() and not out_dir.is_dir():
        raise RunFolderError(f"run folder {out_dir} is a file; choose another run.name or run.root")
    found = run_files(out_dir)
    if not found:
        return Plan(out_dir, "new")
    if overwrite:
        return Plan(out_dir, "overwrite")
    if not resume:
        raise RunFolderError(
            f"{out_dir} already holds a run ({', '.join(found[:4])}); pass run.resume=true to finish it "
            "or run.overwrite=true to replace it (or choose another run.name)"
        )
    other = SUMMARY if eval_run else EVAL
    if (out_dir / other).exists():
        made_by = "runners.run" if eval_run else "runners.eval_model"
        raise RunFolderError(
            f"cannot resume: {out_dir} holds a {made_by} run ({other}); use run.overwrite=true or another run.name"
        )
    recorded, source = _recorded_config(out_dir)
    if recorded is None:
        raise RunFolderError(
            f"cannot resume: {out_dir} records no configuration (no {SUMMARY}, {EVAL} or {CONFIG_DIR}/config.yaml); "
            "use run.overwrite=true"
        )
    current = OmegaConf.to_container(cfg, resolve=True)
    differences = config_differences(recorded, current)
    if differences:
        shown = "; ".join(differences[:3]) + (f"; and {len(differences) - 3} more" if len(differences) > 3 else "")
        raise RunFolderError(
            f"cannot resume {out_dir}: this configuration differs from the recorded one ({source.name}): {shown}; "
            "pass the same settings, or use run.overwrite=true or another run.name"
        )
    try:
        rows = read_raw_rows(out_dir / RAW)
    except ValueError as exc:
        raise RunFolderError(f"cannot resume: {exc}; use run.overwrite=true") from exc
    if eval_run and any(r.side != "baseline" for r in rows):
        raise RunFolderError(
            f"cannot resume: {out_dir} holds a runners.run run (candidate rows in {RAW}); use run.overwrite=true"
        )
    return Plan(out_dir, "resume", rows)


def remove_run(out_dir: Path) -> None:
    """Delete the files and folders a run writes in `out_dir` (and only those)."""
    for name in (*RUN_FILES, *PLOTS):
        (out_dir / name).unlink(missing_ok=True)
        for tmp in out_dir.glob(f".{name}.*.tmp"):  # common.files' temp name, left by a killed write
            tmp.unlink()
    for pattern in RUN_GLOBS:
        for path in out_dir.glob(pattern):
            path.unlink()
    for name in (*RUN_DIRS, CONFIG_DIR):
        if (out_dir / name).is_dir():
            shutil.rmtree(out_dir / name)


def save_config(out_dir: Path, cfg: DictConfig) -> None:
    """The composed config (resolved) and, under Hydra, the command-line overrides, in out_dir/hydra/."""
    folder = out_dir / CONFIG_DIR
    write_atomic(folder / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        overrides = list(HydraConfig.get().overrides.task)
        write_atomic(folder / "overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(overrides)))


def announce_resume(console: Any, finished: int, total: int) -> None:
    """Say that a resumed run keeps `finished` of its `total` task runs (runners.run, runners.eval_model)."""
    if finished:
        console.print(f"resuming: {finished} of {total} task run(s) already finished, running the rest")


def record_until_stopped(
    comparison: Any, stop: GracefulStop, out_dir: Path, outcomes: list[TaskOutcome], progress: bool, console: Any
) -> None:
    """Run the comparison's remaining task runs, appending each to `outcomes` and the run folder as it finishes.

    Stops after the task in flight at the first signal and at once at the second (KeyboardInterrupt,
    swallowed here): what finished is in `outcomes` either way.
    """
    try:
        with RunProgress(comparison.remaining(), progress, console) as bar:
            comparison.on_episode = bar.episode  # several agents at once: progress inside each wave
            for outcome in until_stopped(comparison, stop):
                append_outcome(out_dir, outcome)  # a killed run keeps it (run.resume=true)
                outcomes.append(outcome)
                bar.update(outcome)
    except KeyboardInterrupt:
        pass
