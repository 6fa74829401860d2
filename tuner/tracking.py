"""MLflow for a study: one parent run per study, one nested child run per trial (the baseline included).

Built on the runner's `MlflowTracker` (same store, experiment handling and batching). A resumed study
reopens its parent run (found by the `spectune.study` tag) and logs only trials not logged before, so
`mlflow ui` shows every trial once, side by side, under one parent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial

from runners.tracking import MlflowTracker, _number, _tags, default_uri, flatten_params
from tuner import constraints
from tuner.study import role

STUDY_TAG = "spectune.study"
TRIAL_TAG = "spectune.trial"
# Scalar user attributes logged as metrics on a trial's child run.
TRIAL_METRICS = (
    "seconds_per_success",
    "speedup",
    "success_rate",
    "successes",
    "tasks_run",
    "tasks_total",
    "acceptance_rate",
    "mean_accepted_length",
    "decode_tokens_per_s",
    "memory_bytes",
    "memory_estimate_bytes",
    "largest_context",
    "max_context_tokens",
    "agent_time_s",
)


def trial_metrics(trial: FrozenTrial) -> dict[str, list[tuple[int, float]]]:
    """A trial's metrics: objective, constraints, figures, and per-task / per-position series by step."""
    attrs = trial.user_attrs
    metrics: dict[str, list[tuple[int, float]]] = {}
    if trial.value is not None and (v := _number(trial.value)) is not None:
        metrics["objective_seconds_per_success"] = [(0, v)]
    for key in TRIAL_METRICS:
        if (v := _number(attrs.get(key))) is not None:
            metrics[key] = [(0, v)]
    for name in constraints.CONSTRAINTS:
        if (v := _number(attrs.get(constraints.ATTR_PREFIX + name))) is not None:
            metrics[f"constraint_{name}"] = [(0, v)]
    metrics["regressions"] = [(0, float(len(attrs.get("regressions") or [])))]
    metrics["diverged_tasks"] = [(0, float(len(attrs.get("diverged_tasks") or [])))]
    metrics["task_ratio"] = [(int(s), float(v)) for s, v in attrs.get("task_values") or []]
    metrics["acceptance_by_position"] = [(i, float(r)) for i, r in enumerate(attrs.get("acceptance_by_position") or [])]
    for key, value in (attrs.get("cost_ratios") or {}).items():
        if (v := _number(value)) is not None:
            metrics[f"cost_{key}"] = [(0, v)]
    return {k: v for k, v in metrics.items() if v}


class StudyTracker(MlflowTracker):
    """The study's parent run and a child per finished trial."""

    def __init__(self, *, uri: str | None, experiment: str, study_dir: Path) -> None:
        super().__init__(uri=uri or default_uri(study_dir), experiment=experiment, run_dir=study_dir)
        self._logged: set[int] = set()

    def open_study(self, name: str, params: dict[str, Any], tags: dict[str, Any]) -> bool:
        """Reopen the study's parent run or create it; True when an earlier one was reopened."""
        found = self._client.search_runs(
            [self._experiment_id], filter_string=f"tags.`{STUDY_TAG}` = '{name}' and tags.`spectune.kind` = 'study'"
        )
        self._base_tags = _tags(tags)
        if found:
            self._parent, self._name = found[0].info.run_id, name
            self._client.update_run(self._parent, status="RUNNING")
            children = self._client.search_runs(
                [self._experiment_id], filter_string=f"tags.mlflow.parentRunId = '{self._parent}'", max_results=5000
            )
            self._logged = {int(c.data.tags[TRIAL_TAG]) for c in children if TRIAL_TAG in c.data.tags}
            return True
        self.start(name, params, {**tags, STUDY_TAG: name, "spectune.kind": "study"})
        return False

    def log_trial(self, trial: FrozenTrial) -> None:
        """One finished child run for `trial` (once per trial number)."""
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        parent = self._require_open()
        if trial.number in self._logged:
            return
        attrs = trial.user_attrs
        params = {"trial": trial.number, "role": role(trial), **trial.params, "engine": attrs.get("engine") or {}}
        tags = {
            **self._base_tags,
            MLFLOW_PARENT_RUN_ID: parent,
            TRIAL_TAG: str(trial.number),
            "spectune.kind": "trial",
            "role": role(trial),
            "state": trial.state.name,
            "reason": str(attrs.get("reason") or ""),
            "drafter": str(trial.params.get("drafter", "none")),
            "violated": ",".join(constraints.violated(trial)),
        }
        name = f"{self._name}/{trial.number:04d}-{'baseline' if role(trial) == 'baseline' else tags['drafter']}"
        # The trial's own start and end, so the UI's durations are the trials' (the run is logged once it ended).
        start = int(trial.datetime_start.timestamp() * 1000) if trial.datetime_start else None
        end = int(trial.datetime_complete.timestamp() * 1000) if trial.datetime_complete else None
        run = self._client.create_run(self._experiment_id, run_name=name, tags=_tags(tags), start_time=start)
        self._log(run.info.run_id, metrics=trial_metrics(trial), params=flatten_params(params, self._param_limit))
        status = "FINISHED" if trial.state.name in ("COMPLETE", "PRUNED") else "FAILED"
        self._client.set_terminated(run.info.run_id, status, end_time=end)
        self._logged.add(trial.number)

    def log_study(self, metrics: dict[str, Any], tags: dict[str, Any]) -> None:
        """Study-level figures (best value, drift, confirmation) on the parent."""
        values = {k: [(0, float(v))] for k, v in metrics.items() if _number(v) is not None}
        self._log(self._require_open(), metrics=values, tags=_tags(tags))


class NullStudyTracker:
    """tracking.enabled=false: nothing is logged."""

    def open_study(self, name: str, params: dict[str, Any], tags: dict[str, Any]) -> bool:
        """Nothing to open."""
        return False

    def log_trial(self, trial: FrozenTrial) -> None:
        """Nothing logged."""

    def log_study(self, metrics: dict[str, Any], tags: dict[str, Any]) -> None:
        """Nothing logged."""

    def log_artifacts(self, paths: list[Path]) -> None:
        """Nothing logged."""

    def finish(self, status: str = "FINISHED") -> None:
        """Nothing to close."""


def make_study_tracker(enabled: bool, uri: str | None, experiment: str, study_dir: Path):
    """StudyTracker, or NullStudyTracker when tracking is off."""
    if not enabled:
        return NullStudyTracker()
    return StudyTracker(uri=uri, experiment=experiment, study_dir=study_dir)
