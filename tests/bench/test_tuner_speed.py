"""`python -m bench tuner-speed`: the projection at a stated scale, the study figures it reads, before/after pairs,
and one real study measured end to end."""

from __future__ import annotations

import json

import pytest

from bench import tuner_speed
from bench.__main__ import main
from tests.tuner.conftest import SMALL
from tuner.projection import SIDES


def test_the_scale_projection_is_the_formula_it_prints():
    shape = {"trials": 4, "tasks": 2, "repeats": 1, "confirm_tasks": 3, "confirm_repeats": 2}
    out = tuner_speed.scale_projection(tokens_per_s=10, tokens_per_task=100, agent_s=5, shape=shape)
    live_run, replay_run = 100 / 10 + 5, 100 / 10
    recording = 2 * live_run
    confirmation = 3 * 2 * SIDES * live_run
    export = tuner_speed.Projection.__dataclass_fields__["export_s"].default
    assert out["replay"]["total_s"] == pytest.approx(recording + 4 * SIDES * 2 * replay_run + confirmation + export)
    assert out["live"]["total_s"] == pytest.approx(recording + 4 * SIDES * 2 * live_run + confirmation + export)
    assert "100 tokens / 10 tok/s + 5 s agent" in out["formula"]


def _study(folder, *, search_s, trials, winner_on):
    folder.mkdir(parents=True)
    rows = [{"number": 0, "role": "baseline", "params": {}, "user_attrs": {}}]
    rows += [
        {
            "number": n,
            "role": "candidate",
            "params": {"drafter": "ngram"},
            "user_attrs": {"measure": "replay", "tasks_run": 2, "tasks_total": 4},
        }
        for n in range(1, trials + 1)
    ]
    (folder / "trials.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    interval = {"pooled": 1.1, "low": 1.02, "high": 1.2}
    winners = {"llama-server": {"trial": 1, "on": winner_on, "confirmed": {"speedup_interval": interval}}}
    (folder / "summary.json").write_text(json.dumps({"timings": {"search_s": search_s}, "winners": winners}))


def test_a_study_folder_gives_trials_per_hour_pruning_and_the_answer(tmp_path):
    _study(tmp_path / "s", search_s=36.0, trials=4, winner_on=True)
    run = tuner_speed.read_study(tmp_path / "s", "after", wall_s=60.0)
    assert run.trials == 4 and run.trials_per_hour == pytest.approx(400.0)
    assert (run.replayed, run.task_runs, run.task_runs_full) == (4, 8, 16)
    assert run.answers["llama-server"] == {"drafter": "ngram", "on": True, "confirmed": 1.1, "low": 1.02, "high": 1.2}


def test_before_and_after_pair_by_pair():
    def run(side, search_s, wall_s):
        return tuner_speed.StudyRun(side=side, wall_s=wall_s, search_s=search_s, trials=10)

    runs = [run("before", 100, 200), run("after", 50, 100), run("after", 40, 90), run("before", 120, 180)]
    out = tuner_speed.compare(runs)
    assert out["ratio"]["trials_per_hour"]["min"] == pytest.approx(2.0)  # pairs: (100, 50) and (120, 40)
    assert out["ratio"]["trials_per_hour"]["max"] == pytest.approx(3.0)
    assert out["ratio"]["time_to_answer"]["median"] == pytest.approx((2.0 + 2.0) / 2)
    assert out["after"]["trials_per_hour"]["median"] == pytest.approx((720 + 900) / 2)


def test_a_folder_that_is_no_study_is_one_line(tmp_path):
    with pytest.raises(tuner_speed.ConfigError, match="not a finished study"):
        tuner_speed.read_study(tmp_path, "after", 1.0)


def test_project_only_prints_json(capsys):
    assert main(["tuner-speed", "--project-only", "--json", "--tokens-per-s", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scale"]["replay"]["total_s"] < out["scale"]["live"]["total_s"]
    assert "measured" not in out


def test_one_real_study_is_measured(tmp_path, capsys):
    overrides = [*SMALL, "tuner.trials=2"]
    args = ["tuner-speed", "--studies", "1", "--json", "--log", str(tmp_path / "log")]
    assert main(args + [arg for o in overrides for arg in ("--set", o)]) == 0
    out = json.loads(capsys.readouterr().out)
    (study,) = out["measured"]["after"]["studies"]
    assert study["trials"] == 2 and study["search_s"] > 0 and study["wall_s"] >= study["search_s"]
    assert study["replayed"] == 2  # greedy and lossless: replayed
