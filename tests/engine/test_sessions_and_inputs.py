"""Prefix reuse across turns, vocabulary padding, lossy flagging, bad input and the CLI."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.acceptance import ThresholdAcceptance, TopKAcceptance, TypicalAcceptance
from engine.engine import Engine, EngineConfig
from engine.gamma import GammaPolicy
from engine.loading import ModelNotFoundError, TokenizerMismatchError, check_same_tokenizer, load_model
from engine.sampling import SamplingParams
from engine.stats import GenerationStats
from engine.testing import perturbed_copy, random_model
from engine.tiny import make_tiny_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def target():
    return random_model("qwen2", seed=5)


@pytest.mark.parametrize("drafter", ["none", "ngram", "suffix", "draft_model"])
def test_second_turn_prefills_only_new_tokens_and_matches_cold_session(target, drafter):
    draft = perturbed_copy(target, 0.5) if drafter == "draft_model" else None
    engine = Engine(target, EngineConfig(drafter=drafter, gamma=3), draft=draft)
    session = engine.new_session()
    turn1 = [3, 9, 27, 81, 3, 9, 27]
    out1 = engine.generate(turn1, 12, session=session).tokens
    user2 = [44, 45, 46, 3, 9]
    turn2 = turn1 + out1 + user2
    warm = engine.generate(turn2, 12, session=session)
    # Everything up to the previous turn's last token is reused; that token was emitted but never
    # fed back, so the target computes it now along with the new tokens.
    assert warm.stats.reused_tokens == len(turn1) + len(out1) - 1
    assert warm.stats.prefilled_tokens == len(user2) + 1
    cold = engine.generate(turn2, 12, session=engine.new_session())
    assert cold.stats.reused_tokens == 0 and cold.stats.prefilled_tokens == len(turn2)
    assert warm.tokens == cold.tokens, "prefix reuse changed the output"


def test_diverging_prompt_crops_to_common_prefix(target):
    engine = Engine(target, EngineConfig(drafter="ngram"))
    session = engine.new_session()
    first = [7, 8, 9, 10, 11, 12, 13]
    engine.generate(first, 5, session=session)
    edited = [7, 8, 9, 90, 91]  # diverges after 3 tokens
    warm = engine.generate(edited, 10, session=session)
    assert warm.stats.reused_tokens == 3 and warm.stats.prefilled_tokens == 2
    assert session.kv_length == len(session.history) - 1
    assert warm.tokens == engine.generate(edited, 10, session=engine.new_session()).tokens


def uncached_greedy(model, prompt: list[int], n: int) -> list[int]:
    """Greedy decoding by a full forward over the whole sequence at every step (no cache at all)."""
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            ids.append(int(model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].argmax()))
    return ids[len(prompt) :]


@pytest.mark.parametrize("arch", ["mistral", "gemma3", "gemma2", "qwen2_sliding"])
@pytest.mark.parametrize("drafter", ["none", "ngram", "draft_model"])
def test_diverging_turn_past_the_sliding_window_reuses_the_prefix(arch, drafter):
    """A sliding-window cache crops back past its window on a diverging turn, and stays exact."""
    target = random_model(arch, seed=5)  # window 8 (engine.testing.SLIDING_WINDOW)
    draft = perturbed_copy(target, 0.5) if drafter == "draft_model" else None
    engine = Engine(target, EngineConfig(drafter=drafter, gamma=3), draft=draft)
    session = engine.new_session()
    first = [3, 9, 27, 81, 3, 9, 27, 81, 5, 6, 7, 8, 5, 6, 7, 8, 12]
    out = engine.generate(first, 16, session=session).tokens
    keep = len(first) + 10  # the edit lands 10 tokens into the reply, 19 past the window
    edited = [*first, *out[:10], (out[10] + 1) % 96, 45, 46]
    warm = engine.generate(edited, 16, session=session)
    assert warm.stats.reused_tokens == keep and warm.stats.prefilled_tokens == 3
    assert session.kv_length == len(session.history) - 1
    cold = engine.generate(edited, 16, session=engine.new_session())
    assert warm.tokens == cold.tokens == uncached_greedy(target.model, edited, 16)


def test_totals_sum_turns(target):
    engine = Engine(target, EngineConfig(drafter="ngram"))
    session = engine.new_session()
    a = engine.generate([1, 2, 3, 1, 2, 3], 10, session=session)
    b = engine.generate([*session.history, 4, 5], 10, session=session)
    total = session.totals
    assert total.new_tokens == a.stats.new_tokens + b.stats.new_tokens
    assert total.prompt_tokens == total.reused_tokens + total.prefilled_tokens
    assert total.new_tokens == total.accepted + total.emitting_forwards
    again = GenerationStats.from_dict(total.to_dict())
    assert again.to_dict() == total.to_dict()


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    """Target and a draft sharing its tokenizer with a padded, larger config.vocab_size."""
    root = tmp_path_factory.mktemp("tiny")
    tgt = make_tiny_model(root / "target", layers=2, hidden=64, vocab=512, seed=0, dtype="float64")
    padded = make_tiny_model(
        root / "draft_padded", layers=1, hidden=64, vocab=640, seed=1, tokenizer_from=tgt, dtype="float64"
    )
    other = make_tiny_model(root / "other_tokenizer", layers=1, hidden=32, vocab=400, seed=2)
    return tgt, padded, other


def test_draft_with_padded_vocab_runs_and_stays_exact(tiny_files):
    tgt, padded, _ = tiny_files
    target = load_model(str(tgt), device="cpu", dtype="float64")
    draft = load_model(str(padded), device="cpu", dtype="float64")
    assert draft.vocab_size != target.vocab_size
    prompt = target.tokenizer.encode("def add(a, b):\n    return a + b\n")
    plain = Engine(target).generate(prompt, 30, stop_tokens=frozenset()).tokens
    for t, d in ((target, draft), (draft, target)):  # padded draft, and padded target
        ref = plain if t is target else Engine(t).generate(prompt, 30, stop_tokens=frozenset()).tokens
        spec = Engine(t, EngineConfig(drafter="draft_model", gamma=4), draft=d)
        assert spec.generate(prompt, 30, stop_tokens=frozenset()).tokens == ref
        sampled = Engine(t, EngineConfig(drafter="draft_model", temperature=1.0), draft=d)
        assert len(sampled.generate(prompt, 10, stop_tokens=frozenset()).tokens) == 10


def test_draft_with_other_tokenizer_drafts_as_text_and_stays_exact(tiny_files, caplog):
    """A draft with another tokenizer (400 vs 512 tokens) is accepted and said so; greedy stays plain greedy."""
    tgt, _, other = tiny_files
    target = load_model(str(tgt), device="cpu", dtype="float64")
    foreign = load_model(str(other), device="cpu", dtype="float64")
    with caplog.at_level(logging.INFO, logger="spectune.engine"):
        engine = Engine(target, EngineConfig(drafter="draft_model", gamma=4), draft=foreign)
    assert engine.tokenizer_pair is not None and "512 vs 400 tokens" in engine.tokenizer_pair
    assert "cross-tokenizer pair" in caplog.text
    prompt = target.tokenizer.encode("def add(a, b):\n    return a + b\n")
    plain = Engine(target).generate(prompt, 30, stop_tokens=frozenset()).tokens
    result = engine.generate(prompt, 30, stop_tokens=frozenset())
    assert result.tokens == plain
    assert result.stats.drafted > 0, "the other-tokenizer draft never proposed a target token"
    with pytest.raises(TokenizerMismatchError, match="512 vs 400 tokens"):
        check_same_tokenizer(target, foreign)  # the strict check itself is unchanged


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            EngineConfig(drafter="medusa"),
            r"unknown drafter 'medusa'; allowed: \['dflash', 'draft_model', 'dspark', 'eagle3', 'layer_skip', 'mtp'",
        ),
        (EngineConfig(acceptance="fuzzy"), r"unknown acceptance 'fuzzy'; allowed: \['exact'"),
        (EngineConfig(gamma=0), "gamma must be >= 1"),
        (EngineConfig(gamma_policy="random"), "unknown gamma policy 'random'; allowed"),
        (EngineConfig(drafter="ngram", options={"nope": 1}), "unknown option 'nope'"),
        (EngineConfig(drafter="ngram", options={"max_match": "x"}), "expected a value of type int"),
        (EngineConfig(drafter="ngram", gamma_policy="confidence"), "needs a model drafter"),
        (EngineConfig(drafter="suffix", options={"scope": "world"}), "unknown suffix scope 'world'"),
        (EngineConfig(temperature=-1), "temperature must be >= 0"),
        (EngineConfig(drafter="draft_model"), "needs a draft model"),
        (EngineConfig(drafter="mtp"), "needs MTP weights"),
        (EngineConfig(drafter="mtp+ngram"), "needs MTP weights"),
        (EngineConfig(drafter="ngram+none"), "'none' cannot be combined"),
        (EngineConfig(drafter="ngram+ngram"), "names a drafter twice"),
        (
            EngineConfig(drafter="ngram+suffix", options={"min_match": 2}),
            "ambiguous.*ngram.min_match or suffix.min_match",
        ),
        (
            EngineConfig(drafter="ngram+suffix", options={"draft_model.x": 2}),
            "unknown option 'draft_model.x'.*ngram.min_match",
        ),
        (EngineConfig(drafter="mtp+ngram", options={"policy": "best"}), "unknown combined policy 'best'"),
        (EngineConfig(drafter="layer_skip", options={"layers": 0}), "layers must be >= 1"),
        (EngineConfig(drafter="layer_skip", options={"layers": 9}), "must be below the target's 2 layers"),
        (EngineConfig(drafter="ngram+suffix", gamma_policy="confidence"), "needs a model drafter"),
    ],
)
def test_bad_config_names_the_problem(target, config, message):
    with pytest.raises(ValueError, match=message):
        Engine(target, config)


def test_missing_model_path_says_what_was_looked_for(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelNotFoundError, match=str(missing)):
        load_model(str(missing))


def test_bad_generate_arguments(target):
    engine = Engine(target)
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate([], 5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        engine.generate([1], 0)
    with pytest.raises(ValueError, match="context"):
        engine.generate([1] * 600, 5)  # random_model's context is 512


def test_lossy_rules_are_flagged_and_change_greedy_output(target):
    """A permissive lossy rule over a partly-agreeing draft must visibly change greedy output."""
    draft = perturbed_copy(target, 0.6, seed=3)
    prompt = [5, 6, 7, 8, 9, 5, 6, 7]
    plain = Engine(target).generate(prompt, 40).tokens
    lossy = Engine(target, EngineConfig(drafter="draft_model", acceptance="topk", options={"k": 40}), draft=draft)
    result = lossy.generate(prompt, 40)
    assert result.lossy and result.to_dict()["lossy"] is True
    assert result.tokens != plain, "topk(k=40) accepted nothing the target disagreed with"


def test_lossy_rule_semantics():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]]))
    greedy = SamplingParams()
    assert TopKAcceptance(type(TopKAcceptance().options)(k=2))._accepts(logits[:1], [1], greedy) == [True]
    assert TopKAcceptance(type(TopKAcceptance().options)(k=2))._accepts(logits[:1], [2], greedy) == [False]
    threshold = ThresholdAcceptance(type(ThresholdAcceptance().options)(tau=0.2))
    assert threshold._accepts(logits[:1], [1], greedy) == [True]
    assert threshold._accepts(logits[:1], [2], greedy) == [False]
    # typical: p(x) > min(eps, delta * exp(-H)); uniform row: H = ln 4, bound = min(0.09, 0.3 / 4) = 0.075
    typical = TypicalAcceptance()
    assert typical._accepts(logits[1:], [3], greedy) == [True]
    assert typical._accepts(logits[:1], [3], greedy) == [False]  # 0.05 < min(0.09, 0.3*exp(-H))


def test_heuristic_gamma_policy():
    policy = GammaPolicy("heuristic", gamma=3, max_gamma=6)
    policy.update(drafted=3, accepted=3)
    assert policy.next_length() == 5
    policy.update(drafted=5, accepted=5)
    assert policy.next_length() == 6  # bounded
    policy.update(drafted=6, accepted=2)
    assert policy.next_length() == 5
    for _ in range(10):
        policy.update(drafted=1, accepted=0)
    assert policy.next_length() == 1


def test_cli_json_and_errors(tiny_files):
    tgt, padded, _ = tiny_files
    cmd = [
        sys.executable,
        "-m",
        "engine",
        "--model",
        str(tgt),
        "--draft",
        str(padded),
        "--drafter",
        "draft_model",
        "--gamma",
        "3",
        "--prompt",
        "def f(x):",
        "--max-new-tokens",
        "8",
        "--dtype",
        "float64",
        "--json",
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) >= {"text", "tokens", "stats", "lossy"} and out["lossy"] is False
    assert len(out["tokens"]) == out["stats"]["new_tokens"] <= 8
    bad = subprocess.run(
        [*cmd[:5], "--drafter", "nope", "--prompt", "x"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "unknown drafter 'nope'" in bad.stderr
