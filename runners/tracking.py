"""Experiment tracking for a run: MLflow (a parent run per configuration, a nested run per side) or nothing.

Logs exactly what the runner produces; not a general MLflow wrapper. It talks to MLflow through `MlflowClient`
only, never the fluent API, so no global active run leaks into callers (the tuner opens runs of its own), and it
imports mlflow lazily so a disabled tracker costs nothing.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from common.errors import ConfigError

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from rich.console import Console

SIDES = ("baseline", "candidate")  # speculation OFF, speculation ON
STATUSES = ("FINISHED", "FAILED", "KILLED")
DEFAULT_DB = "mlflow.db"  # in the runs root, beside the run folders
ARTIFACTS_DIR = "mlartifacts"  # beside a sqlite database, so runs and their files stay together
PARAM_VALUE_LIMIT = 500  # MLflow's historical limit; the tracker uses the installed version's (6000 in 3.x)
TAG_VALUE_LIMIT = 5000  # below every MLflow version's limit (5000 in 1.x, 8000 in 3.x)
# MLflow's allowed key characters minus the colon, which Windows rejects.
_BAD_KEY_CHARS = re.compile(r"[^\w./\- ]")
# Loggers that print table creation and migrations when a new sqlite database is opened.
_NOISY_LOGGERS = ("mlflow.store.db.utils", "alembic")
# MLflow 3's experiment kind (an experiment tag): spectune's experiments hold training-style runs (parameters and
# metrics), not GenAI traces. The values are the UI's ExperimentKind enum ("Machine learning" in its selector).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
Points = list[tuple[int, float]]  # a metric's (step, value) pairs


class TrackingConfigError(ConfigError):
    """The tracking configuration cannot work (bad URI, unreachable backend, deleted experiment)."""


class Tracker(Protocol):
    """What the runner logs: a parent run, one child per side, the comparison, files and plots."""

    def start(self, name: str, params: dict[str, Any], tags: dict[str, Any]) -> None:
        """Open the parent run with the run's configuration as params."""

    def log_side(
        self,
        side: str,
        params: dict[str, Any],
        tags: dict[str, Any],
        summary_side: dict[str, Any],
        per_task: list[dict[str, Any]],
        per_position: dict[str, list[int]],
    ) -> None:
        """Log one side (baseline or candidate) as a finished child run of the parent."""

    def log_comparison(self, metrics: dict[str, Any]) -> None:
        """Log ON-vs-OFF figures (regressions, improvements, ratios) on the parent."""

    def log_artifacts(self, paths: list[Path]) -> None:
        """Attach files or folders to the parent."""

    def log_plots(self, summary: dict[str, Any]) -> None:
        """Render the summary's plots, save them as PNG in the run folder and attach them to the parent."""

    def finish(self, status: str = "FINISHED") -> None:
        """Close the parent (and any child left open) with FINISHED, FAILED or KILLED; idempotent."""


class NullTracker(Tracker):
    """A tracker that records nothing, so the runner's loop has no `if tracking:` branches.

    It subclasses the Protocol explicitly and so inherits its methods, each of which does nothing.
    """


def truncate(value: str, limit: int) -> str:
    """value cut to at most limit characters, ending with a marker that says it was cut and how long it was."""
    if len(value) <= limit:
        return value
    marker = f"...[truncated, {len(value)} chars]"
    return value[: max(limit - len(marker), 0)] + marker


def _param_value(value: Any) -> str:
    """Strings as they are, everything else as JSON (true, null, [1, 2]) so values read the same everywhere."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def flatten_params(params: dict[str, Any], limit: int = PARAM_VALUE_LIMIT) -> dict[str, str]:
    """Nested dicts as dotted keys with string values of at most limit characters.

    Keys are made safe for MLflow (unsupported characters become `_`); two entries that end up with the same key
    and different values raise ValueError, since MLflow params are immutable and one would silently be lost.
    """
    flat: dict[str, str] = {}
    origin: dict[str, str] = {}

    def visit(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                visit(f"{prefix}.{key}" if prefix else str(key), item)
            return
        key = _BAD_KEY_CHARS.sub("_", prefix)
        text = truncate(_param_value(value), limit)
        if key in flat and flat[key] != text:
            raise ValueError(f"params {origin[key]!r} and {prefix!r} both map to key {key!r} with different values")
        flat[key], origin[key] = text, prefix

    for key, value in params.items():
        visit(str(key), value)
    return flat


def _tag_value(value: Any) -> str:
    """Tags are strings: booleans as true/false (what the UI filters on), the rest as text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return truncate(str(value), TAG_VALUE_LIMIT)


def _tags(tags: dict[str, Any]) -> dict[str, str]:
    """String tags, None values dropped."""
    return {str(k): _tag_value(v) for k, v in tags.items() if v is not None}


def _number(value: Any) -> float | None:
    """A finite float from an int or float, None for anything else (bools, None, NaN, infinities)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def split_values(values: dict[str, Any], lists_are_ids: bool = False) -> tuple[dict[str, Points], dict[str, str]]:
    """Metrics (key -> values by step) and tags from a dict of results.

    Numbers are metrics at step 0; None, NaN and infinities are skipped (never logged as NaN); strings and
    booleans are tags; nested dicts get dotted keys. A list is a metric history by index (its None entries
    skipped) unless lists_are_ids, where it is a list of ids: its length as a metric and the ids as a tag.
    """
    metrics: dict[str, Points] = {}
    tags: dict[str, str] = {}

    def visit(key: str, value: Any) -> None:
        if isinstance(value, dict):
            for sub, item in value.items():
                visit(f"{key}.{sub}", item)
        elif isinstance(value, list | tuple):
            if lists_are_ids:
                metrics[key] = [(0, float(len(value)))]
                tags[key] = _tag_value(",".join(str(v) for v in value))
            else:
                history = [(i, x) for i, x in enumerate(_number(v) for v in value) if x is not None]
                if history:
                    metrics[key] = history
        elif isinstance(value, str | bool):
            tags[key] = _tag_value(value)
        elif (number := _number(value)) is not None:
            metrics[key] = [(0, number)]

    for key, value in values.items():
        visit(_BAD_KEY_CHARS.sub("_", str(key)), value)
    return metrics, tags


def per_position_rates(per_position: dict[str, list[int]]) -> list[tuple[int, float]]:
    """(position, accepted / drafted) for every draft position that was drafted at least once."""
    drafted = list(per_position.get("drafted") or [])
    accepted = list(per_position.get("accepted") or [])
    if len(drafted) != len(accepted):
        raise ValueError(f"per_position: {len(drafted)} drafted counts but {len(accepted)} accepted counts")
    return [(i, a / d) for i, (d, a) in enumerate(zip(drafted, accepted, strict=True)) if d > 0]


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence the INFO lines MLflow prints while it opens, creates or migrates a sqlite database.

    Warnings still show, except one SQLAlchemy deprecation raised inside MLflow's own store (nothing we can act on).
    """
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The ``noload`` loader strategy", category=DeprecationWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite:/// URI (relative to the working directory when relative), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    path = uri[len("sqlite:///") :].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path).resolve()


class MlflowTracker:
    """Logs a run to MLflow: a parent run with the configuration, comparison, files and plots; a child per side."""

    def __init__(self, *, uri: str, experiment: str, run_dir: Path) -> None:
        """Open the tracking store and find or create the experiment; TrackingConfigError if that fails."""
        from mlflow import MlflowClient
        from mlflow.utils import validation

        self.uri = uri
        self.run_dir = run_dir
        self._param_limit = getattr(validation, "MAX_PARAM_VAL_LENGTH", PARAM_VALUE_LIMIT)
        db = _sqlite_path(uri)
        try:
            if db is not None:
                db.parent.mkdir(parents=True, exist_ok=True)
            with _quiet():
                self._client: MlflowClient = MlflowClient(tracking_uri=uri)
                self._experiment_id = self._experiment(experiment, db)
        except TrackingConfigError:
            raise
        except Exception as exc:  # whatever the backend raises, the cause is the URI or what is behind it
            raise TrackingConfigError(
                f"cannot use MLflow tracking URI {uri!r} ({type(exc).__name__}: {exc}); set tracking.uri to a "
                "sqlite:///path/to/mlflow.db or http://host:port URI, or tracking.enabled=false"
            ) from exc
        self._parent: str | None = None
        self._name = ""
        self._base_tags: dict[str, str] = {}
        self._open: list[str] = []  # child runs created and not yet terminated
        self._sides: set[str] = set()
        self._finished = False

    def _experiment(self, name: str, db: Path | None) -> str:
        """The id of the named experiment, created if missing (artifacts beside a sqlite database), kind: training."""
        from mlflow.exceptions import MlflowException

        found = self._client.get_experiment_by_name(name)
        if found is None:
            location = (db.parent / ARTIFACTS_DIR).as_uri() if db is not None else None
            try:
                return self._client.create_experiment(
                    name, artifact_location=location, tags={EXPERIMENT_KIND_TAG: TRAINING_KIND}
                )
            except MlflowException:
                # Another process may have created it in between; if not, the original error stands.
                found = self._client.get_experiment_by_name(name)
                if found is None:
                    raise
        if found.lifecycle_stage != "active":
            raise TrackingConfigError(
                f"MLflow experiment {name!r} is deleted in {self.uri}; restore it "
                f"(mlflow experiments restore --experiment-id {found.experiment_id}) or set tracking.experiment"
            )
        # An experiment made before the kind was set (or by hand) gets it on reopening; a kind someone chose
        # deliberately is theirs and stays.
        if EXPERIMENT_KIND_TAG not in found.tags:
            self._client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)
        return found.experiment_id

    @property
    def parent_run_id(self) -> str | None:
        """The parent run's id once started (for callers that nest or link runs)."""
        return self._parent

    def _require_open(self) -> str:
        """The parent run id; RuntimeError if start() was not called or finish() already was."""
        if self._parent is None:
            raise RuntimeError("MlflowTracker: call start() before logging")
        if self._finished:
            raise RuntimeError("MlflowTracker: the run is finished; nothing more can be logged")
        return self._parent

    def _log(
        self,
        run_id: str,
        metrics: dict[str, Points] | None = None,
        params: dict[str, str] | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        """One batched write (the client splits it to MLflow's batch limits)."""
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        self._client.log_batch(
            run_id,
            metrics=[Metric(k, v, now, step) for k, points in (metrics or {}).items() for step, v in points],
            params=[Param(k, v) for k, v in (params or {}).items()],
            tags=[RunTag(k, v) for k, v in (tags or {}).items()],
        )

    def start(self, name: str, params: dict[str, Any], tags: dict[str, Any]) -> None:
        """Open the parent run; its tags (hardware, model, task, lossy) are inherited by the children."""
        if self._parent is not None:
            raise RuntimeError("MlflowTracker: start() was already called; one tracker records one run")
        flat = flatten_params(params, self._param_limit)  # before creating the run: a bad dict leaves nothing open
        self._base_tags = _tags(tags)
        run = self._client.create_run(self._experiment_id, run_name=name, tags=self._base_tags)
        self._parent, self._name = run.info.run_id, name
        self._log(self._parent, params=flat)

    def log_side(
        self,
        side: str,
        params: dict[str, Any],
        tags: dict[str, Any],
        summary_side: dict[str, Any],
        per_task: list[dict[str, Any]],
        per_position: dict[str, list[int]],
    ) -> None:
        """One nested run: the side's summary as metrics, per-task time/success by step, per-position acceptance."""
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        parent = self._require_open()
        if side not in SIDES:
            raise ValueError(f"side must be one of {SIDES}, got {side!r}")
        if side in self._sides:
            raise RuntimeError(f"MlflowTracker: side {side!r} was already logged")
        flat = flatten_params(params, self._param_limit)
        values = {k: v for k, v in summary_side.items() if k != "per_position"}  # logged below, by position
        metrics, summary_tags = split_values(values)
        metrics["task_time_s"] = [(int(t["step"]), float(t["time_s"])) for t in per_task if t["time_s"] is not None]
        metrics["task_success"] = [(int(t["step"]), float(bool(t["success"]))) for t in per_task]
        rates = per_position_rates(per_position)
        metrics["acceptance_by_position"] = rates
        for position, rate in rates:
            metrics[f"acceptance_pos_{position}"] = [(0, rate)]
        run_tags = {**self._base_tags, **_tags(tags), **summary_tags, "side": side, MLFLOW_PARENT_RUN_ID: parent}
        run = self._client.create_run(self._experiment_id, run_name=f"{self._name}/{side}", tags=run_tags)
        child = run.info.run_id
        self._open.append(child)
        self._sides.add(side)
        self._log(child, metrics={k: v for k, v in metrics.items() if v}, params=flat)
        self._client.set_terminated(child, "FINISHED")
        self._open.remove(child)

    def log_comparison(self, metrics: dict[str, Any]) -> None:
        """Numbers as metrics on the parent; lists of instance ids as their count (metric) and the ids (tag)."""
        values, tags = split_values(metrics, lists_are_ids=True)
        self._log(self._require_open(), metrics=values, tags=tags)

    def log_artifacts(self, paths: list[Path]) -> None:
        """Files at the artifact root, folders under their own name; FileNotFoundError after logging the rest."""
        parent = self._require_open()
        missing = []
        for path in map(Path, paths):
            if path.is_dir():
                self._client.log_artifacts(parent, str(path), artifact_path=path.name)
            elif path.is_file():
                self._client.log_artifact(parent, str(path))
            else:
                missing.append(str(path))
        if missing:
            raise FileNotFoundError(f"not logged to MLflow, no such file or folder: {', '.join(missing)}")

    def log_plots(self, summary: dict[str, Any]) -> None:
        """Save the plots as PNG in the run folder (so they exist without MLflow) and attach them under plots/."""
        from runners.plots import save_plots

        parent = self._require_open()
        # The attached file is the saved PNG itself, so the run folder and MLflow hold the same bytes.
        for path in save_plots(summary, self.run_dir):
            self._client.log_artifact(parent, str(path), artifact_path="plots")

    def finish(self, status: str = "FINISHED") -> None:
        """Terminate any child left open, then the parent, with status; later calls do nothing."""
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        if self._parent is None or self._finished:
            return
        for child in list(self._open):
            self._client.set_terminated(child, status)
            self._open.remove(child)
        self._client.set_terminated(self._parent, status)
        self._finished = True


def default_uri(run_dir: Path) -> str:
    """sqlite:/// URI of the database shared by every run under the same runs root (absolute path)."""
    return f"sqlite:///{(run_dir.parent / DEFAULT_DB).resolve().as_posix()}"


def make_tracker(enabled: bool, uri: str | None, experiment: str, run_dir: Path) -> Tracker:
    """NullTracker when disabled; otherwise an MlflowTracker on uri, or on <runs root>/mlflow.db when uri is None."""
    if not enabled:
        return NullTracker()
    return MlflowTracker(uri=uri or default_uri(run_dir), experiment=experiment, run_dir=run_dir)


def finish_or_report(
    tracker: Tracker, status: str, console: Console, log: Callable[[], None], where: str = "the run folder"
) -> None:
    """Run `log` (the command's calls to `tracker`), then finish the tracker with `status`.

    A tracking failure is one line on `console` and the tracker is finished as FAILED if it still can be;
    it never raises, since the command has already written its results (to `where`).
    """
    try:
        log()
        tracker.finish(status)
    except Exception as exc:
        console.print(f"[red]MLflow logging failed:[/] {type(exc).__name__}: {exc} (results are in {where})")
        try:
            tracker.finish("FAILED")
        except Exception:
            pass
