"""Ctrl-C / SIGTERM semantics and resuming or replacing a run folder, in process with real signals.

Signals are sent to this process from inside a chosen task (a wrapper around `Comparison.episode`),
so where they land is exact: the first one lets the task in flight finish and stops, a second one
abandons it at once; both write the partial summary of the finished task runs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

from engine.loading import ModelFileError
from runners.compare import Comparison
from runners.eval_model import evaluate_model
from runners.interrupt import GracefulStop, until_stopped
from runners.outputs import read_raw_rows
from runners.run import execute
from runners.runfolder import RunFolderError
from tests.conftest import runner_config


def _cfg(root: Path, target: Path, *overrides: str):
    return runner_config(
        root,
        f"model.target={target}",
        "model.draft=null",
        "task.split=dev",
        "task.limit=3",
        "agent.max_new_tokens=16",
        "agent.max_format_errors=1",
        "run.name=r",
        "run.warmup=false",
        "tracking.enabled=false",
        *overrides,
    )


def _signals_in(monkeypatch, when: dict[tuple[int, str], list[int]]) -> list[tuple[int, str]]:
    """Send `when[(task index, side)]` signals to this process as that episode starts; returns the episodes run."""
    real = Comparison.episode
    calls: list[tuple[int, str]] = []

    def episode(self, side, engine, instance, repeat, seed):
        index = [i.instance_id for i in self.instances].index(instance.instance_id)
        calls.append((index, side))
        for sig in when.get((index, side), []):
            os.kill(os.getpid(), sig)
        return real(self, side, engine, instance, repeat, seed)

    monkeypatch.setattr(Comparison, "episode", episode)
    return calls


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_first_sigterm_finishes_the_task_in_flight_then_stops(tiny_dir, tmp_path, monkeypatch):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    calls = _signals_in(monkeypatch, {(0, "baseline"): [signal.SIGTERM]})
    summary = execute(_cfg(tmp_path, tiny_dir))
    assert calls == [(0, "baseline"), (0, "candidate")]  # task 0 finished both sides; task 1 never started
    written = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary))
    assert written["partial"] is True and written["interrupted"] == "SIGTERM"
    assert written["baseline"]["tasks"] == written["candidate"]["tasks"] == 1 and len(written["per_task"]) == 1
    assert len(read_raw_rows(tmp_path / "r" / "repeats.jsonl")) == 2
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before  # handlers restored


def test_second_signal_abandons_the_task_in_flight(tiny_dir, tmp_path, monkeypatch):
    # The sides take turns going first: task 1 runs ON, then OFF; both signals come as its OFF side starts.
    calls = _signals_in(monkeypatch, {(1, "baseline"): [signal.SIGINT, signal.SIGINT]})
    summary = execute(_cfg(tmp_path, tiny_dir))
    assert calls == [(0, "baseline"), (0, "candidate"), (1, "candidate"), (1, "baseline")]
    written = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["partial"] is True and written["interrupted"] == "SIGINT"
    # Task 1's candidate had finished, but the task had not: only task 0 is reported and recorded.
    rows = read_raw_rows(tmp_path / "r" / "repeats.jsonl")
    assert sorted(r.side for r in rows) == ["baseline", "candidate"] and len({r.instance_id for r in rows}) == 1
    assert [r["instance_id"] for r in written["per_task"]] == [rows[0].instance_id]
    assert written["baseline"]["tasks"] == 1 and written["candidate"]["tasks"] == 1
    assert len(list((tmp_path / "r" / "trajectories" / "candidate" / "r0").glob("*.json"))) == 2  # task 1 ran ON


def test_resume_keeps_finished_task_runs_and_runs_the_rest(tiny_dir, tmp_path, monkeypatch):
    tiny_dir = Path(shutil.copytree(tiny_dir, tmp_path / "model"))  # this test breaks its config.json for a while
    _signals_in(monkeypatch, {(0, "candidate"): [signal.SIGTERM]})
    first = execute(_cfg(tmp_path, tiny_dir))
    assert first["partial"] is True and len(first["per_task"]) == 1
    folder = tmp_path / "r"
    kept = {(r.instance_id, r.side): r for r in read_raw_rows(folder / "repeats.jsonl")}
    before = _snapshot(folder)

    with pytest.raises(RunFolderError, match=r"run\.resume=true.*run\.overwrite=true"):
        execute(_cfg(tmp_path, tiny_dir))
    with pytest.raises(RunFolderError, match=r"engine\.gamma: 4 -> 6"):
        execute(_cfg(tmp_path, tiny_dir, "run.resume=true", "engine.gamma=6"))
    config = (tiny_dir / "config.json").read_text()
    (tiny_dir / "config.json").write_text("{")
    with pytest.raises(ModelFileError, match=r"config\.json"):  # fails while loading: the folder stays as it was
        execute(_cfg(tmp_path, tiny_dir, "run.resume=true"))
    (tiny_dir / "config.json").write_text(config)
    assert _snapshot(folder) == before

    calls = _signals_in(monkeypatch, {})
    done = execute(_cfg(tmp_path, tiny_dir, "run.resume=true"))
    assert sorted({i for i, _ in calls}) == [1, 2]  # task 0 is not run again
    assert done["partial"] is False and done["interrupted"] is None
    assert done["baseline"]["tasks"] == done["candidate"]["tasks"] == 3
    rows = read_raw_rows(folder / "repeats.jsonl")
    assert len(rows) == 6
    for row in rows:
        if (row.instance_id, row.side) in kept:
            assert row == kept[(row.instance_id, row.side)]  # the same measurement, not a re-run
    ids = [r["instance_id"] for r in done["per_task"]]
    assert ids[0] == first["per_task"][0]["instance_id"] and len(set(ids)) == 3  # run order, task 0 first
    preds = (folder / "predictions-candidate.jsonl").read_text().splitlines()
    assert [json.loads(p)["instance_id"] for p in preds] == ids
    assert json.loads((folder / "summary.json").read_text())["partial"] is False
    assert (folder / "hydra" / "config.yaml").is_file()

    (folder / "notes.txt").write_text("mine")
    (folder / "trajectories" / "baseline" / "r0" / "stale.json").write_text("{}")
    calls = _signals_in(monkeypatch, {})
    again = execute(_cfg(tmp_path, tiny_dir, "run.overwrite=true", "task.limit=1"))
    assert calls == [(0, "baseline"), (0, "candidate")] and again["baseline"]["tasks"] == 1
    assert (folder / "notes.txt").read_text() == "mine"  # not a run file: left alone
    assert not (folder / "trajectories" / "baseline" / "r0" / "stale.json").exists()
    assert len(read_raw_rows(folder / "repeats.jsonl")) == 2


def test_resume_and_overwrite_exclude_each_other(tiny_dir, tmp_path):
    with pytest.raises(ValueError, match="exclude each other"):
        execute(_cfg(tmp_path, tiny_dir, "run.resume=true", "run.overwrite=true"))
    assert not (tmp_path / "r").exists()


def test_eval_model_stops_and_resumes_the_same_way(tiny_dir, tmp_path, monkeypatch):
    cfg = ("engine=none", "task.limit=2")
    _signals_in(monkeypatch, {(0, "baseline"): [signal.SIGTERM]})
    first = evaluate_model(_cfg(tmp_path, tiny_dir, *cfg))
    written = json.loads((tmp_path / "r" / "eval.json").read_text())
    assert first["partial"] is True and written["interrupted"] == "SIGTERM" and written["tasks"] == 1
    with pytest.raises(RunFolderError, match=r"run\.resume=true"):
        evaluate_model(_cfg(tmp_path, tiny_dir, *cfg))
    with pytest.raises(RunFolderError, match=r"runners\.eval_model run"):
        execute(_cfg(tmp_path, tiny_dir, *cfg, "run.resume=true"))  # an eval folder is not a comparison's
    calls = _signals_in(monkeypatch, {})
    done = evaluate_model(_cfg(tmp_path, tiny_dir, *cfg, "run.resume=true"))
    assert calls == [(1, "baseline")]
    assert done["partial"] is False and done["tasks"] == 2 and len(done["per_task"]) == 2
    assert done["per_task"][0] == first["per_task"][0]
    predictions = (tmp_path / "r" / "predictions.jsonl").read_text().splitlines()
    assert [json.loads(p)["instance_id"] for p in predictions] == [r["instance_id"] for r in done["per_task"]]


def test_a_torn_last_line_is_dropped_a_damaged_middle_line_is_named(tmp_path):
    from runners.outcomes import SideRun
    from runners.outputs import raw_row

    good = json.dumps(raw_row(SideRun("a", "baseline", 0, "submitted", True, "resolved", 1.0, 0.5, patch="d")))
    path = tmp_path / "repeats.jsonl"
    path.write_text(good + "\n" + good[:40])
    (run,) = read_raw_rows(path)
    assert (run.instance_id, run.patch, run.success) == ("a", "d", True)
    path.write_text(good[:40] + "\n" + good + "\n")
    with pytest.raises(ValueError, match=r"repeats\.jsonl:1 is not valid JSON"):
        read_raw_rows(path)
    old = json.loads(good)
    del old["patch"]  # a row of an older version: not resumable, so that task is run again
    path.write_text(json.dumps(old) + "\n")
    assert read_raw_rows(path) == []


def test_until_stopped_closes_the_iterator_and_handlers_come_back():
    closed = []

    def tasks():
        try:
            yield from range(5)
        finally:
            closed.append(True)

    before = signal.getsignal(signal.SIGINT)
    got = []
    with GracefulStop() as stop:
        assert signal.getsignal(signal.SIGINT) != before
        for item in until_stopped(tasks(), stop):
            got.append(item)
            if item == 1:
                os.kill(os.getpid(), signal.SIGINT)  # first signal: only a request
    assert got == [0, 1] and closed == [True] and stop.exit_code == 130
    assert signal.getsignal(signal.SIGINT) == before
    with GracefulStop() as stop, stop.hold():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # while the results are written: noted, not raised
    assert stop.count == 2 and stop.exit_code == 143
