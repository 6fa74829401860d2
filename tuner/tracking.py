"""MLflow for a study: one run per trial (the baseline included) beside one study run, in a training-kind experiment.

Built on the runner's `MlflowTracker` (same store, experiment handling and batching). Trial runs are top-level runs
tagged with their study (`spectune.study`, `spectune.kind=trial`, `spectune.study_run` = the study run's id), not
nested under the study run: MLflow 3.17's runs table folds nested runs under a collapsed parent row, and keeps
every matching child's parent even under a search filter, so nested trials stayed hidden until clicked open. The
study run carries the study's figures, plots and files. A resumed study reopens its study run (found by tag) and
logs only the trials not logged before.

`StudyTracker.view_urls` gives the pages to open after `mlflow ui`: the experiment's runs table filtered to the
study's trials, best speedup first, with their key figures as columns (a view stored on the experiment), the
compare-runs page of the trials and the study run.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial

from common.errors import ConfigError
from common.units import GIB
from runners.tracking import _BAD_KEY_CHARS, MlflowTracker, _number, _tags, default_uri, flatten_params
from tuner import constraints

STUDY_TAG = "spectune.study"
TRIAL_TAG = "spectune.trial"
KIND_TAG = "spectune.kind"  # study | trial
STUDY_RUN_TAG = "spectune.study_run"  # on a trial: its study run's id (the link nesting used to give)
DEFAULT_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default
# MLflow 3.17's UI takes the experiment's kind from its GenAI / model-training switch (URL parameter
# `workflowType`, else the browser's stored choice, GenAI by default), not from the experiment tag, so every URL
# handed out asks for the training workflow: the experiment opens on its runs, not on an empty GenAI overview.
TRAINING_WORKFLOW = "machine_learning"
# Experiment tag prefix under which MLflow's UI keeps saved and shared views of the runs table (filter, sort,
# columns); the URL parameter `viewStateShareKey=<id>` opens view <id>.
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
VIEW_PARAMETER = "viewStateShareKey"
VIEW_MAX_PARAMS = 40  # knob columns in the view, so the tag stays well under MLflow's 20000-character limit

# Scalar user attributes logged as metrics on a trial's run.
TRIAL_METRICS = (
    "seconds_per_success",
    "off_seconds_per_success",
    "speedup",
    "speedup_low",
    "speedup_high",
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
# Figures logged to 4 significant digits: MLflow's runs table prints a metric's full float (0.5931298830002257),
# which no column fits, and the measurements' noise is percent-level anyway. trials.jsonl keeps the exact values,
# and so does the objective metric; counts and byte sizes are logged as they are.
ROUNDED = frozenset(
    {
        "seconds_per_success",
        "off_seconds_per_success",
        "speedup",
        "speedup_low",
        "speedup_high",
        "success_rate",
        "acceptance_rate",
        "mean_accepted_length",
        "decode_tokens_per_s",
        "agent_time_s",
        "memory_gib",
    }
)
# User attributes logged as tags (text, or ids that are not quantities).
TRIAL_TAG_ATTRS = ("measure", "host", "reason", "duplicate_of")
FIT_PREFIX = "fit."  # tag per server: how the trial's configuration maps to it (exact | approximate | none)

# The trials view: the key figures first, then the configuration, then how it ended and where it maps.
VIEW_METRICS = (
    "speedup",
    "speedup_low",
    "speedup_high",
    "seconds_per_success",
    "off_seconds_per_success",
    "acceptance_rate",
    "memory_gib",
)
# Tags right after the figures (how the trial ended, how it was measured, where its configuration maps), the rest
# after the knobs. FIT_PREFIX stands for every fit.* tag, the usual servers first.
VIEW_TAGS_FIRST = ("state", "measure", FIT_PREFIX)
VIEW_TAGS_LAST = ("reason", "violated", "duplicate_of", "host")
FIT_ORDER = ("llama-server", "vLLM", "SGLang", "TensorRT-LLM")
VIEW_SORT = "speedup"  # descending: the best paired speedup on top
_NOT_KNOBS = ("trial", "role")  # params on every trial that are not the configuration
_COLUMN = re.compile(r"^(metrics|params|tags)\.`(.*)`$")


def _figure(value: float) -> float:
    """value to 4 significant digits."""
    return float(f"{value:.4g}")


def trial_metrics(trial: FrozenTrial) -> dict[str, list[tuple[int, float]]]:
    """A trial's metrics: objective, constraints, figures, and per-task / per-position series by step."""
    attrs = trial.user_attrs
    metrics: dict[str, list[tuple[int, float]]] = {}
    if trial.value is not None and (v := _number(trial.value)) is not None:
        metrics["objective_seconds_per_success"] = [(0, v)]
    for key in TRIAL_METRICS:
        if (v := _number(attrs.get(key))) is not None:
            metrics[key] = [(0, _figure(v) if key in ROUNDED else v)]
    if "memory_bytes" in metrics:  # GiB reads at a glance in a table column; bytes stay for exactness
        metrics["memory_gib"] = [(0, _figure(metrics["memory_bytes"][0][1] / GIB))]
    for side, clocks in (attrs.get("generation_s") or {}).items():
        for clock, seconds in (clocks or {}).items():
            if (v := _number(seconds)) is not None:
                metrics[_BAD_KEY_CHARS.sub("_", f"generation_s.{side}.{clock}")] = [(0, v)]
    for name in constraints.CONSTRAINTS:
        if (v := _number(attrs.get(constraints.ATTR_PREFIX + name))) is not None:
            metrics[f"constraint_{name}"] = [(0, v)]
    metrics["regressions"] = [(0, float(len(attrs.get("regressions") or [])))]
    metrics["diverged_tasks"] = [(0, float(len(attrs.get("diverged_tasks") or [])))]
    metrics["task_ratio"] = [(int(s), float(v)) for s, v in attrs.get("task_values") or []]
    metrics["acceptance_by_position"] = [(i, float(r)) for i, r in enumerate(attrs.get("acceptance_by_position") or [])]
    for key, value in (attrs.get("cost_ratios") or {}).items():
        if (v := _number(value)) is not None:
            metrics[_BAD_KEY_CHARS.sub("_", f"cost_{key}")] = [(0, v)]
    return {k: v for k, v in metrics.items() if v}


def trial_role(trial: FrozenTrial) -> str:
    """baseline | candidate | finish (the tuner's `role` user attribute; candidate when unset)."""
    return str(trial.user_attrs.get("role") or "candidate")


def trial_tags(trial: FrozenTrial) -> dict[str, str]:
    """A trial's own tags: number, role, state, drafter, measure, reason, server fit, broken constraints."""
    attrs = trial.user_attrs
    tags: dict[str, Any] = {
        TRIAL_TAG: str(trial.number),
        KIND_TAG: "trial",
        "role": trial_role(trial),
        "state": trial.state.name,
        "drafter": str(trial.params.get("drafter", "none")),
    }
    for key in TRIAL_TAG_ATTRS:
        if attrs.get(key) not in (None, ""):
            tags[key] = attrs[key]
    for server, fit in (attrs.get("server_fit") or {}).items():
        if fit is not None:
            tags[FIT_PREFIX + str(server)] = fit
    # A failed trial recorded no constraints; naming all of them as broken would only hide its reason.
    if trial.state.name != "FAIL" and (broken := constraints.violated(trial)):
        tags["violated"] = ",".join(broken)
    return {_BAD_KEY_CHARS.sub("_", k): v for k, v in _tags(tags).items()}


def _quote(value: str) -> str:
    """A string literal for MLflow's search syntax."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    raise ConfigError(f"cannot search for {value!r}: it holds both quote characters")


def trials_filter(study: str) -> str:
    """MLflow search filter that selects exactly the study's trial runs."""
    return f"tags.`{STUDY_TAG}` = {_quote(study)} and tags.`{KIND_TAG}` = 'trial'"


def view_id(study: str) -> str:
    """The id of the study's trials view (a URL-safe form of the study name, with a hash when it had to change)."""
    safe = re.sub(r"[^A-Za-z0-9_-]+", "-", study).strip("-")
    if safe != study or not safe:
        safe = f"{safe}-{hashlib.sha1(study.encode()).hexdigest()[:8]}".lstrip("-")
    return f"spectune-{safe}"


def _column(kind: str, key: str) -> str:
    """The runs table's column id for a metric, param or tag (MLflow UI's `type.\\`key\\``)."""
    return f"{kind}.`{key}`"


def view_columns(knobs: set[str], tags: set[str]) -> list[str]:
    """Column ids of the trials view: key figures, state, measure, server fit, the knobs, then reason and the rest."""

    def tag_columns(keys: tuple[str, ...]) -> list[str]:
        found = []
        for key in keys:
            if key == FIT_PREFIX:
                fits = [t for t in tags if t.startswith(FIT_PREFIX)]
                order = {FIT_PREFIX + server: i for i, server in enumerate(FIT_ORDER)}
                found += sorted(fits, key=lambda t: (order.get(t, len(order)), t))
            elif key in tags:  # only tags some trial has: an always-empty column would just take room
                found.append(key)
        return [_column("tags", t) for t in found]

    params = ["drafter"] * ("drafter" in knobs) + sorted(knobs - {"drafter"} - set(_NOT_KNOBS))[:VIEW_MAX_PARAMS]
    return (
        [_column("metrics", m) for m in VIEW_METRICS]
        + tag_columns(VIEW_TAGS_FIRST)
        + [_column("params", p) for p in params]
        + tag_columns(VIEW_TAGS_LAST)
    )


def view_state(study: str, columns: list[str]) -> dict[str, Any]:
    """The runs-table state of the trials view, as MLflow's UI stores a shared view (search facets + UI state)."""
    widths = {}
    for column in columns:
        label = _COLUMN.match(column).group(2)
        widths[column] = max(105, min(20 + 8 * len(label), 240))  # header and "approximate"; long reasons: tooltip
    return {
        "searchFilter": trials_filter(study),
        "orderByKey": _column("metrics", VIEW_SORT),  # as a column id, so the UI names the sort and marks it
        "orderByAsc": False,
        "selectedColumns": columns,
        "columnOrder": columns,  # the UI applies widths only to ordered columns
        "columnWidths": widths,
        "runsHiddenMode": "SHOW_ALL",  # charts show every trial, not the UI's default first ten
    }


def trials_url(base: str, experiment_id: str, study: str) -> str:
    """The experiment's runs table on the study's trials view, in the training workflow."""
    query = urllib.parse.urlencode({"workflowType": TRAINING_WORKFLOW, VIEW_PARAMETER: view_id(study)})
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def compare_url(base: str, experiment_id: str, run_ids: list[str]) -> str:
    """MLflow UI's comparison page for these runs."""
    compact = {"separators": (",", ":")}  # no spaces: they would become "+" in an already long URL
    query = urllib.parse.urlencode(
        {
            "runs": json.dumps(run_ids, **compact),
            "experiments": json.dumps([experiment_id]),
            "workflowType": TRAINING_WORKFLOW,  # the side bar of the training workflow, as on the trials page
        }
    )
    return f"{base.rstrip('/')}/#/compare-runs?{query}"


def run_url(base: str, experiment_id: str, run_id: str) -> str:
    """MLflow UI's page of one run (its metrics, params, plots and files)."""
    query = urllib.parse.urlencode({"workflowType": TRAINING_WORKFLOW})
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?{query}"


class StudyTracker(MlflowTracker):
    """The study's run, a top-level run per finished trial, and the stored trials view."""

    def __init__(self, *, uri: str | None, experiment: str, study_dir: Path) -> None:
        super().__init__(uri=uri or default_uri(study_dir), experiment=experiment, run_dir=study_dir)
        self._runs: dict[int, str] = {}  # trial number -> run id, for the trials this process knows were logged
        self._knobs: set[str] = set()  # param keys of the trials' configurations (view columns)
        self._tag_keys: set[str] = set()  # trial tag keys seen (view columns)
        self._view_columns: list[str] = []

    @property
    def experiment_id(self) -> str:
        """The MLflow experiment's id."""
        return self._experiment_id

    def _search(self, filter_string: str) -> list:
        """Every run of the experiment that matches, page by page."""
        runs, token = [], None
        while True:
            page = self._client.search_runs(
                [self._experiment_id], filter_string=filter_string, max_results=1000, page_token=token
            )
            runs += list(page)
            token = page.token
            if not token:
                return runs

    def _trial_runs(self) -> list:
        """The study's trial runs in the store: top-level ones, and nested ones a study logged before un-nesting."""
        runs = {r.info.run_id: r for r in self._search(trials_filter(self._name))}
        if self._parent is not None:
            nested = self._search(f"tags.mlflow.parentRunId = '{self._parent}'")
            runs.update({r.info.run_id: r for r in nested if TRIAL_TAG in r.data.tags})
        return sorted(runs.values(), key=lambda r: int(r.data.tags.get(TRIAL_TAG, -1)))

    def _note_columns(self, params: dict[str, str], tags: dict[str, str]) -> bool:
        """Remember a trial's param and tag keys for the view; True when a new one appeared."""
        knobs = {k for k in params if k not in _NOT_KNOBS and not k.startswith("engine.")}
        before = (len(self._knobs), len(self._tag_keys))
        self._knobs |= knobs
        self._tag_keys |= set(tags)
        return (len(self._knobs), len(self._tag_keys)) != before

    def _write_view(self) -> None:
        """Store (or refresh) the study's trials view on the experiment, keeping columns another worker added."""
        key = VIEW_TAG_PREFIX + view_id(self._name)
        now = int(time.time() * 1000)
        created = now
        old = self._client.get_experiment(self._experiment_id).tags.get(key)
        if old:
            try:
                envelope = json.loads(old)
                created = int(envelope["createdAt"])
                for column in json.loads(envelope["state"]).get("selectedColumns", []):
                    match = _COLUMN.match(column)
                    if match and match.group(1) == "params":
                        self._knobs.add(match.group(2))
                    elif match and match.group(1) == "tags":
                        self._tag_keys.add(match.group(2))
            except (ValueError, KeyError, TypeError):
                pass  # not ours or not readable: rewritten below
        columns = view_columns(self._knobs, self._tag_keys)
        state = json.dumps(view_state(self._name, columns))
        envelope = {"name": f"spectune trials: {self._name}", "createdAt": created, "updatedAt": now, "state": state}
        self._client.set_experiment_tag(self._experiment_id, key, json.dumps(envelope))
        self._view_columns = columns

    def open_study(self, name: str, params: dict[str, Any], tags: dict[str, Any]) -> bool:
        """Reopen the study's run or create it, and store its trials view; True when an earlier one was reopened."""
        found = self._client.search_runs(
            [self._experiment_id], filter_string=f"tags.`{STUDY_TAG}` = {_quote(name)} and tags.`{KIND_TAG}` = 'study'"
        )
        self._base_tags = _tags(tags)
        if found:
            self._parent, self._name = found[0].info.run_id, name
            self._client.update_run(self._parent, status="RUNNING")
            for run in self._trial_runs():
                self._runs[int(run.data.tags[TRIAL_TAG])] = run.info.run_id
                self._note_columns(run.data.params, run.data.tags)
        else:
            self.start(name, params, {**tags, STUDY_TAG: name, KIND_TAG: "study"})
        self._write_view()
        return bool(found)

    def log_trial(self, trial: FrozenTrial) -> None:
        """One finished top-level run for `trial`, tagged with the study (once per trial number)."""
        study_run = self._require_open()
        if trial.number in self._runs:
            return
        attrs = trial.user_attrs
        params = {"trial": trial.number, "role": trial_role(trial), **trial.params, "engine": attrs.get("engine") or {}}
        flat = flatten_params(params, self._param_limit)  # before creating the run: a bad dict leaves nothing open
        own = trial_tags(trial)
        tags = {**self._base_tags, STUDY_TAG: self._name, STUDY_RUN_TAG: study_run, **own}
        name = f"{self._name}/{trial.number:04d}-{'baseline' if own['role'] == 'baseline' else own['drafter']}"
        # The trial's own start and end, so the UI's durations are the trials' (the run is logged once it ended).
        start = int(trial.datetime_start.timestamp() * 1000) if trial.datetime_start else None
        end = int(trial.datetime_complete.timestamp() * 1000) if trial.datetime_complete else None
        run = self._client.create_run(self._experiment_id, run_name=name, tags=tags, start_time=start)
        self._log(run.info.run_id, metrics=trial_metrics(trial), params=flat)
        status = "FINISHED" if trial.state.name in ("COMPLETE", "PRUNED") else "FAILED"
        self._client.set_terminated(run.info.run_id, status, end_time=end)
        self._runs[trial.number] = run.info.run_id
        if self._note_columns(flat, own):
            self._write_view()

    def log_study(self, metrics: dict[str, Any], tags: dict[str, Any]) -> None:
        """Study-level figures (best value, drift, confirmation) on the study run."""
        values = {k: [(0, float(v))] for k, v in metrics.items() if _number(v) is not None}
        self._log(self._require_open(), metrics=values, tags=_tags(tags))

    def view_urls(self, base: str = DEFAULT_UI) -> dict[str, str]:
        """Pages to open after `mlflow ui` (at `base`): trials (runs table view), compare (the trials), study (run)."""
        if self._parent is None:
            return {}
        try:  # every worker's trials, in trial order
            run_ids = [r.info.run_id for r in self._trial_runs()]
        except Exception:  # the store is unreachable now: the trials this process logged still make a link
            run_ids = [self._runs[n] for n in sorted(self._runs)]
        urls = {
            "trials": trials_url(base, self._experiment_id, self._name),
            "study": run_url(base, self._experiment_id, self._parent),
        }
        if run_ids:
            urls["compare"] = compare_url(base, self._experiment_id, run_ids)
        return urls


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

    def view_urls(self, base: str = DEFAULT_UI) -> dict[str, str]:
        """No pages: nothing was logged."""
        return {}


def make_study_tracker(enabled: bool, uri: str | None, experiment: str, study_dir: Path):
    """StudyTracker, or NullStudyTracker when tracking is off."""
    if not enabled:
        return NullStudyTracker()
    return StudyTracker(uri=uri, experiment=experiment, study_dir=study_dir)
