"""`mlflow ui` shows the study as one parent run with one child per trial: checked through the REST API of a real
MLflow server on 127.0.0.1 (loopback only), after a real study with the bundled models."""

from __future__ import annotations

import json

from tuner.search import execute
from tuner.ui_snapshot import run_metrics, run_tags, served, study_runs


def test_the_served_ui_lists_one_child_run_per_trial_with_its_metrics(tune, tmp_path, monkeypatch):
    from engine.drafters.ngram import NgramDrafter

    original, calls = NgramDrafter.propose, []

    def crash_once(self, *args, **kwargs):  # one failed trial, to see its reason in MLflow
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected for the UI test")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(NgramDrafter, "propose", crash_once)
    db = tmp_path / "mlflow.db"
    cfg = tune(
        "tuner.trials=2",
        "tracking.enabled=true",
        f"tracking.uri=sqlite:///{db}",
        "tracking.experiment=ui-test",
        drafters={"ngram": {"gamma": [2, 4]}},
    )
    execute(cfg)
    with served(f"sqlite:///{db}") as base:  # a real `mlflow server` (the UI's backend) on 127.0.0.1
        _, parent, children = study_runs(base, "ui-test", "t")
    rows = [json.loads(line) for line in (tmp_path / "runs" / "t" / "trials.jsonl").read_text().splitlines()]
    assert sorted(int(run_tags(c)["spectune.trial"]) for c in children) == [r["number"] for r in rows]
    by_trial = {int(run_tags(c)["spectune.trial"]): c for c in children}
    assert run_tags(by_trial[0])["role"] == "baseline"
    for row in rows:
        child = by_trial[row["number"]]
        assert run_tags(child)["state"] == row["state"]
        if row["state"] == "COMPLETE":
            m = run_metrics(child)
            assert m["objective_seconds_per_success"] == row["value"]
            assert {"constraint_vram_gib", "constraint_regressions", "speedup", "largest_context"} <= m.keys()
            if row["role"] == "candidate":
                assert {"acceptance_rate", "mean_accepted_length", "decode_tokens_per_s"} <= m.keys()
        else:
            assert child["info"]["status"] == "FAILED" and "injected for the UI test" in run_tags(child)["reason"]
    assert "best_seconds_per_success" in run_metrics(parent)
