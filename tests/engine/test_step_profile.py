"""The step profile (engine/profile.py): opt-in, its counts agree with the generation statistics, every phase
is recorded, and profiling changes no output. Structure only: no test reads a duration's size."""

from __future__ import annotations

import pytest

from engine.engine import Engine, EngineConfig
from engine.profile import PHASES, StepProfile
from engine.testing import random_model

PROMPT = [(i * 37 + 5) % 96 for i in range(30)] + [(i * 11 + 3) % 96 for i in range(10)] * 2


@pytest.mark.parametrize("drafter", ["none", "ngram", "suffix"])
def test_a_profiled_generation_counts_every_decode_step_by_fed_rows_and_changes_nothing(drafter):
    target = random_model("llama", seed=2)
    engine = Engine(target, EngineConfig(drafter=drafter, gamma=3))
    plain = engine.generate(PROMPT, 30, stop_tokens=frozenset())
    assert engine.step_profile is None
    engine.step_profile = profile = StepProfile()
    first = engine.generate(PROMPT, 30, stop_tokens=frozenset())
    second = engine.generate(PROMPT + first.tokens + [7, 8], 20, stop_tokens=frozenset())  # a second turn
    assert first.tokens == plain.tokens  # profiling changes no output
    stats = first.stats + second.stats
    assert profile.steps == stats.target_forwards - 2  # one prefill forward per turn
    assert sum(n for n, _ in profile.forward_by_rows.values()) == profile.steps
    fed = sum(rows * n for rows, (n, _) in profile.forward_by_rows.items())
    # each decode step feeds its last token and its draft; a turn's prefill forward may carry a draft too
    assert 0 <= stats.drafted - (fed - profile.steps) <= 2 * 3
    assert set(profile.seconds) == set(PHASES) and all(s >= 0 for s in profile.seconds.values())
    assert profile.seconds["prefill"] > 0 and profile.seconds["forward"] > 0
    if drafter != "none":
        assert any(rows > 1 for rows in profile.forward_by_rows)
    view = profile.to_dict()
    assert set(view["per_step_us"]) == {*PHASES, "total"}
    assert view["per_step_us"]["total"] == pytest.approx(sum(view["per_step_us"][p] for p in PHASES))
    assert {int(k) for k in view["forward_by_rows"]} == set(profile.forward_by_rows)
    assert set(profile.forward_us()) == {r for r in profile.forward_by_rows if r <= 9}


def test_profiles_add_up():
    a, b = StepProfile(), StepProfile()
    a.add_step(1, 0.5)
    b.add_step(1, 0.25)
    b.add_step(5, 1.0)
    a.seconds["draft"] = 2.0
    total = a + b
    assert total.steps == 3 and total.forward_by_rows == {1: [2, 0.75], 5: [1, 1.0]}
    assert total.seconds["draft"] == 2.0 and a.forward_by_rows == {1: [1, 0.5]}  # operands untouched
