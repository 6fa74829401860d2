"""Paired replay on the bundled models: every exact drafter replays a live OFF recording token for token, a
divergence is kept and that task measured live (never used), and both kinds of comparison warm up first and
take turns (behaviour only, never wall-clock)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from agents.loop import AgentConfig
from agents.recording import Conversation, replay
from engine.engine import EngineConfig
from runners.compare import Comparison
from runners.models import PROJECT_ROOT, load_models
from runners.replay import ReplayComparison, classify
from runners.workload import Workload
from tasks.environment import make_environment
from tasks.suites import load_suite

MODELS = PROJECT_ROOT / "models" / "spectune-tiny"
EXACT_DRAFTERS = ("none", "ngram", "suffix", "draft_model", "mtp", "layer_skip", "mtp+ngram")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """OFF run live on two dev tasks with every conversation recorded: (workload, {(task, repeat): run})."""
    torch.set_num_threads(1)
    models = load_models(str(MODELS / "target"), str(MODELS / "draft"), dtype="float32", mtp=str(MODELS / "mtp"))
    instances = load_suite("swe-lite", "dev", 2, None, None, "spread")
    workload = Workload(models, instances, make_environment("swe-lite"), AgentConfig(), warmup=False)
    comparison = Comparison(workload, None, tmp_path_factory.mktemp("record"), record=True)
    outcomes = list(comparison)
    runs = {(o.instance_id, o.repeat): o.baseline for o in outcomes}
    assert all(r.conversation is not None and r.conversation.turns for r in runs.values())
    assert all(r.success for r in runs.values()), [r.message for r in runs.values()]
    return workload, runs


@pytest.mark.parametrize("drafter", EXACT_DRAFTERS)
def test_every_exact_drafter_replays_the_live_off_tokens(recorded, drafter, tmp_path):
    workload, runs = recorded
    comparison = ReplayComparison(workload, EngineConfig(drafter=drafter), tmp_path, runs)
    outcomes = list(comparison)
    assert comparison.divergences == [] and comparison.live_tasks == []
    for o in outcomes:
        live = runs[(o.instance_id, o.repeat)]
        for side in (o.baseline, o.candidate):
            assert side.generated_ids == live.generated_ids, (drafter, o.instance_id, side.side)
            assert side.success == live.success and side.patch == live.patch
            # the recording's own agent work plus this side's generation, measured now
            assert side.time_s == pytest.approx(live.time_s - live.model_s + side.model_s)
            assert side.clocks["wall"] == side.model_s and side.clocks["cpu"] >= 0.0
        if drafter != "none":
            assert o.candidate.stats.drafted > 0  # it really speculated


def test_a_divergence_is_kept_and_its_task_measured_live(recorded, tmp_path):
    workload, runs = recorded
    key = next(iter(runs))
    tampered = dict(runs)
    run = runs[key]
    conversation = Conversation.from_dict(run.conversation.to_dict())
    reply = conversation.turns[1].reply
    reply[2] = (reply[2] + 1) % 100  # a token the model would not write: every replay leaves the recording here
    tampered[key] = dataclasses.replace(run, conversation=conversation)
    comparison = ReplayComparison(workload, EngineConfig(drafter="ngram"), tmp_path, tampered)
    outcomes = {o.instance_id: o for o in comparison}
    [divergence] = comparison.divergences
    assert divergence["instance_id"] == key[0] and divergence["turn"] == 1 and divergence["position"] == 2
    assert divergence["kind"] == "bug" and divergence["margin"] > divergence["tolerance"]  # not a near-tie
    assert comparison.live_tasks == [key]
    live = outcomes[key[0]]
    for side in (live.baseline, live.candidate):
        assert side.trajectory is not None and side.evaluation_s > 0  # the real agent ran and was graded
        assert side.generated_ids == run.generated_ids  # the true greedy stream, not the tampered recording
    other = next(o for iid, o in outcomes.items() if iid != key[0])
    assert other.candidate.trajectory is None  # the untouched task was replayed


def test_live_and_replayed_comparisons_warm_up_then_take_turns(recorded, tmp_path):
    workload, runs = recorded
    warm = workload.with_(warmup=True, repeats=2)
    live = Comparison(warm, EngineConfig(drafter="ngram"), tmp_path / "live")
    list(live)
    kinds = [e.kind for e in live.events]
    assert kinds[:2] == ["warm-up", "warm-up"] and "warm-up" not in kinds[2:]
    episodes = [e for e in live.events if e.kind == "episode"]
    firsts = [episodes[i].side for i in range(0, len(episodes), 2)]
    assert firsts == ["baseline", "candidate", "candidate", "baseline"]  # task by task, repeat by repeat
    replayed = ReplayComparison(warm, EngineConfig(drafter="ngram"), tmp_path / "replay", runs)
    list(replayed)
    assert [e.kind for e in replayed.events[:2]] == ["warm-up", "warm-up"]
    turns = [e for e in replayed.events if e.kind == "turn"]
    pairs = [turns[i : i + 2] for i in range(0, len(turns), 2)]
    assert all({a.side, b.side} == {"baseline", "candidate"} and a.turn == b.turn for a, b in pairs)
    by_task: dict[tuple[str, int], list[str]] = {}
    for first, _ in pairs:
        by_task.setdefault((first.instance_id, first.repeat), []).append(first.side)
    for firsts in by_task.values():  # within a task the side that goes first changes at every turn
        assert all(a != b for a, b in itertools.pairwise(firsts)), firsts


def test_classify_reads_the_top_two_margin_of_a_plain_forward(recorded):
    workload, runs = recorded
    run = next(iter(runs.values()))
    turn = run.conversation.turns[0]
    verdict = classify(workload.models.target, turn.prompt)
    with torch.inference_mode():
        logits = workload.models.target.model(input_ids=torch.tensor([turn.prompt])).logits[0, -1].double()
    top = torch.topk(logits, 2).values
    assert verdict["margin"] == pytest.approx(float(top[0] - top[1]))
    assert verdict["dtype"] == "float32" and verdict["kind"] in ("near-tie", "bug")


def test_a_replay_through_one_model_reports_every_turn_equal(recorded):
    workload, runs = recorded
    run = next(iter(runs.values()))
    from agents.engine_model import EngineModel
    from engine.engine import Engine

    model = EngineModel(Engine(workload.models.target, EngineConfig()), workload.models.target.tokenizer, "off")
    done = replay(model, run.conversation)
    assert done.identical and done.turns == done.turns_equal == len(run.conversation.turns)
    assert done.generated_ids == run.generated_ids
