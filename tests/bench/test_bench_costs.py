"""The cost profile and the analytic bound of `python -m bench engine` (behaviour, never timings)."""

import pytest

from bench.costs import KS, bound, forward_costs, limit_rows
from engine.loading import load_model


def test_forward_costs_profiles_every_k_relative_to_one_token(tiny_dir):
    model = load_model(str(tiny_dir), device="cpu", dtype="float32")
    costs = forward_costs(model, list(range(5, 45)), repeats=2)
    assert costs["context"] == 40 and sorted(costs["t_s"]) == list(KS)
    assert costs["R"][1] == 1.0 and all(costs["t_s"][k] > 0 for k in KS)
    assert all(len(v) == 2 for v in costs["R_per_repeat"].values())


def test_bound_is_tokens_per_step_over_step_cost():
    assert bound(2.0, 1.0, 0.0) == 2.0
    assert bound(3.0, 1.2, 0.3) == pytest.approx(2.0)


def test_limit_rows_weigh_verify_cost_by_drafting_steps_and_add_the_draft_cost():
    target = {"t_s": {1: 0.01, 2: 0.011, 5: 0.012}, "R": {1: 1.0, 2: 1.1, 5: 1.2}}
    draft = {"t_s": {1: 0.002}, "R": {1: 1.0}}
    acceptance = {
        # plain: 21 forwards over 1 prompt, 20 decode steps in 0.2 s of verification: 10 ms a step
        "spectune_plain": {
            "tokens_per_target_forward": 0.9,
            "per_prompt": [{}],
            "engine_stats": {"timed": {"generations": 1, "target_forwards": 21, "verify_s": 0.2}},
        },
        # 11 forwards over 1 prompt: 10 decode steps, 5 of which drafted (4 tokens each): d = 0.5, k = 5
        "spectune_ngram": {
            "tokens_per_target_forward": 1.8,
            "target_forwards": 11,
            "drafts": 5,
            "mean_draft_length": 4.0,
            "per_prompt": [{}],
            "engine_stats": {"timed": {"generations": 1, "draft_s": 0.01, "target_forwards": 11, "verify_s": 0.13}},
        },
        "spectune_draft_model": {
            "tokens_per_target_forward": 2.7,
            "target_forwards": 11,
            "drafts": 10,
            "mean_draft_length": 1.0,
            "per_prompt": [{}],
        },
    }
    rows = limit_rows(acceptance, {"ngram": 1.5, "draft_model": 1.0}, target, draft, gamma=4)
    ngram, model = rows["ngram"], rows["draft_model"]
    assert ngram["E"] == pytest.approx(2.0) and ngram["k"] == 5 and ngram["drafting_share"] == 0.5
    assert ngram["R"] == pytest.approx(0.5 * 1.2 + 0.5)
    assert ngram["C"] == pytest.approx(0.1)  # 1 ms of drafting per decode step / 10 ms per plain step
    assert ngram["bound"] == pytest.approx(2.0 / 1.2)
    assert ngram["measured_over_bound"] == pytest.approx(1.5 / (2.0 / 1.2))
    assert model["k"] == 2 and model["R"] == pytest.approx(1.1)
    assert model["C"] == pytest.approx(1.0 * 0.002 / 0.01)  # one draft forward of one token per step
    assert model["bound"] == pytest.approx(3.0 / 1.3)
    assert "suffix" not in rows  # not measured: no row
    # Inside the generation: 13 ms of verification per step against plain's 10 ms; 1 ms of drafting.
    assert ngram["R_in_generation"] == pytest.approx(1.3) and ngram["C_in_generation"] == pytest.approx(0.1)
    assert ngram["bound_in_generation"] == pytest.approx(2.0 / 1.4)
    assert ngram["measured_over_bound_in_generation"] == pytest.approx(1.5 / (2.0 / 1.4))
    assert model["R_in_generation"] is None  # no verification timer given: not computed
