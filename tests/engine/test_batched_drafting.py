"""Batched drafting: a drafter class's `propose_many` for several sessions equals each session's own `propose`.

The draft model (and layer_skip, which drafts through the same code) and the MTP module chain every session of
a batch together, one draft forward per chain step (engine/drafters/draft_model.py, engine/drafters/mtp.py).
Here sessions at different positions, with different budgets, catch-up lengths, confidence thresholds, forced
prefixes and (for the short-context draft) position limits propose through `propose_many` and, on identical
copies of their state, one at a time through `propose`: the drafts are the same tokens with the same q rows
(float64, greedy and sampled with each session's own generator), and the drafters' state after it is the same.
A batch step with N such sessions makes one draft forward per chain step, not one per session per step; and a
batch mixing drafter classes (grouped per class) still gives every session its stream alone.
"""

from __future__ import annotations

import pytest
import torch
from test_batched_conformance import THIRD
from test_conformance import DRAFT_LIMIT, PROMPTS, make_engine

from engine.batch import Batch, decode_together
from engine.drafters import Draft, DraftContext
from engine.engine import Engine, EngineConfig
from engine.testing import random_model

# (prompt, tokens generated before proposing): sessions at different positions with different draft caches
STATES = [(PROMPTS[0], 5), (PROMPTS[1], 9), (THIRD, 2), ([*PROMPTS[1], *PROMPTS[0]], 0)]
BUDGETS = [4, 1, 3, 6]  # each session's max_tokens
CONFIDENCES = [None, 0.2, None, 0.25]  # each session's stop threshold (the confidence policy's)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def target(request):
    """A float64 target on the engine's forward (`many` is one ragged forward), its next-token distribution peaked.

    Peaked (logit_scale 15): its drafters' top probabilities then spread over 0.1-0.7, so the thresholds above
    stop some chains midway; a plain random model's are all near 1 / vocab.
    """
    return random_model(request.param, seed=7, forward="torch", logit_scale=15.0)


def twin_sessions(engine: Engine, states=STATES) -> tuple[list, list]:
    """Two identical sets of sessions (same prompts, same generations, same seeds), one per way of proposing."""
    twins = []
    for _ in range(2):
        sessions = []
        for i, (prompt, generated) in enumerate(states):
            session = engine.new_session(seed=10 + i)
            if generated:
                engine.generate(prompt, generated, session=session)
            else:
                session.history = list(prompt)  # never decoded: the drafter catches up the whole prompt
            sessions.append(session)
        twins.append(sessions)
    return twins[0], twins[1]


def contexts(engine: Engine, sessions, budgets, confidences, prefixes=None) -> list[DraftContext]:
    """Each session's draft context, its generator reseeded (both twins draw the same samples)."""
    out = []
    for i, session in enumerate(sessions):
        session.generator.manual_seed(100 + i)
        prefix = list(prefixes[i]) if prefixes else []
        out.append(DraftContext(session.history, budgets[i], engine.params, session.generator, confidences[i], prefix))
    return out


def assert_same_drafts(together: list[Draft], alone: list[Draft]) -> None:
    for i, (t, a) in enumerate(zip(together, alone, strict=True)):
        assert t.tokens == a.tokens, f"session {i}: {t.tokens} together, {a.tokens} alone"
        assert t.sources == a.sources and t.limited == a.limited, i
        assert (t.probs is None) == (a.probs is None), i
        if t.probs is not None:
            torch.testing.assert_close(t.probs, a.probs, atol=1e-10, rtol=1e-10, msg=f"session {i}: q rows differ")


def propose_both(engine, batched, single, budgets, confidences, prefixes=None) -> list[Draft]:
    """propose_many over `batched`, propose one by one over `single` (same state); asserts equal, returns the drafts."""
    cls = type(batched[0].drafter)
    together = cls.propose_many([s.drafter for s in batched], contexts(engine, batched, budgets, confidences, prefixes))
    alone = [
        s.drafter.propose(c)
        for s, c in zip(single, contexts(engine, single, budgets, confidences, prefixes), strict=True)
    ]
    assert_same_drafts(together, alone)
    return together


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
@pytest.mark.parametrize("case", ["draft_model", "draft_model_padded_vocab", "draft_model_short_context", "layer_skip"])
def test_draft_model_propose_many_equals_propose(target, case, temperature):
    engine = make_engine(target, case, gamma=4, temperature=temperature, seed=3)
    batched, single = twin_sessions(engine)
    drafts = propose_both(engine, batched, single, BUDGETS, CONFIDENCES)
    assert any(d.tokens for d in drafts)
    for b, s in zip(batched, single, strict=True):
        assert b.drafter._cached == s.drafter._cached and b.drafter._verified == s.drafter._verified
        assert b.drafter._cache.get_seq_length() == s.drafter._cache.get_seq_length() == len(b.drafter._cached)
    # Again from there, as if every draft was accepted and one more token emitted, after another drafter's
    # tokens (a combined drafter's `extend`) for two sessions, and with other budgets and thresholds.
    for sessions in (batched, single):
        for session, draft in zip(sessions, drafts, strict=True):
            session.history = [*session.history, *draft.tokens, 1]
    again = propose_both(engine, batched, single, [2, 5, 4, 1], [0.4, None, 0.3, 0.9], [[], [7, 8], [], [9]])
    if case == "draft_model_short_context":  # sessions near, at and past the draft's position limit
        lengths = [len(s.history) for s in batched]
        assert min(lengths) < DRAFT_LIMIT < max(lengths), lengths
        assert any(d.limited for d in [*drafts, *again]), "no session reached the draft's position limit"
    else:
        budgets = [*BUDGETS, 2, 5, 4, 1]  # tokens after a prefix: it does not count against a budget
        short = [len(d.tokens) < k for d, k in zip([*drafts, *again], budgets, strict=True)]
        assert any(short), "no draft stopped early on its confidence threshold: the test would miss the stop"


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
@pytest.mark.parametrize("case", ["mtp", "mtp_draft_vocab"])
def test_mtp_propose_many_equals_propose(target, case, temperature):
    engine = make_engine(target, case, gamma=4, temperature=temperature, seed=3)
    states = [*STATES[:3], (PROMPTS[0], 3)]
    batched, single = twin_sessions(engine, states)
    for sessions in (batched, single):  # session 3 starts a new turn: no hidden state for its last token yet
        sessions[3].history = [*sessions[3].history, 4, 5]
        sessions[3].drafter.begin(sessions[3].history)
    prefixes = [[], [7], [], []]  # session 1 chains through another drafter's token first
    drafts = propose_both(engine, batched, single, BUDGETS, [0.25, None, None, None], prefixes)
    assert drafts[3] == Draft() and drafts[1].tokens and drafts[2].tokens

    def state(drafter):
        return drafter._entries, drafter._known, drafter._cache.length

    for b, s in zip(batched, single, strict=True):
        assert state(b.drafter) == state(s.drafter)
        e = b.drafter._cache.length
        torch.testing.assert_close(b.drafter._cache.k[:, :e], s.drafter._cache.k[:, :e], atol=1e-10, rtol=1e-10)
    # Proposing again crops each block cache back to its verified entries first (the chains' are dropped).
    again = propose_both(engine, batched, single, [2, 5, 4, 1], [0.99, None, None, 0.2])
    assert again[1].tokens and again[2].tokens and again[3] == Draft()
    short = [len(d.tokens) < k for d, k in zip([drafts[0], again[0]], [BUDGETS[0], 2], strict=True)]
    assert any(short), "no draft stopped early on its confidence threshold: the test would miss the stop"
    for b, s in zip(batched, single, strict=True):
        assert state(b.drafter) == state(s.drafter)


def count_calls(obj, name: str) -> list[int]:
    """Wrap `obj.name` (an instance attribute shadowing the method); returns the session count of every call."""
    calls: list[int] = []
    original = getattr(obj, name)

    def counting(caches, *args, **kw):
        calls.append(len(caches))
        return original(caches, *args, **kw)

    setattr(obj, name, counting)
    return calls


@pytest.mark.parametrize("k", [1, 3])
def test_batch_step_makes_one_draft_forward_per_chain_step(target, k):
    """N draft_model sessions: every batch step makes k draft forward calls over all N sessions (not N * k)."""
    engine = make_engine(target, "draft_model", gamma=k)
    prompts = [PROMPTS[0], PROMPTS[1], THIRD, [*PROMPTS[1], 3]]
    forward = engine.draft.forward
    calls = count_calls(forward, "many")
    fed: list[int] = []
    forward.observers.append(lambda start, tokens: fed.append(len(tokens)))
    try:
        batch = Batch(engine.runtime)
        for prompt in prompts:
            batch.join(engine.decoding(prompt, 30))
        for step in range(5):
            calls.clear(), fed.clear()
            batch.step()
            assert calls == [len(prompts)] * k, f"step {step}: draft forward calls (sessions each) {calls}"
            assert len(fed) == len(prompts) * k  # each session's own rows: k feeds per session per step
            if step == 0:  # the first chain step also feeds each session's whole prompt
                assert fed[: len(prompts)] == [len(p) for p in prompts]
    finally:
        del forward.many
        forward.observers.clear()


def test_batch_step_makes_one_mtp_block_forward_per_chain_step(target):
    """N mtp sessions: from the second step on, every batch step makes gamma block forwards over all N sessions."""
    k = 3
    engine = make_engine(target, "mtp", gamma=k)
    prompts = [PROMPTS[0], PROMPTS[1], THIRD]
    module = engine.mtp
    calls = count_calls(module, "step_many")
    singles = count_calls(module, "step")
    try:
        batch = Batch(engine.runtime)
        for prompt in prompts:
            batch.join(engine.decoding(prompt, 30))
        for step in range(5):
            calls.clear()
            batch.step()
            # the first step of a turn proposes nothing (no hidden state of the prompt yet)
            assert calls == ([len(prompts)] * k if step else []), f"step {step}: block forwards {calls}"
        assert singles == []
    finally:
        del module.step_many, module.step


def test_a_batch_mixing_drafter_classes_gives_each_session_its_stream_alone(target):
    """Sessions of several engines (draft_model, mtp, layer_skip, ngram) in one batch: each class proposes once per
    step for its sessions, and every stream equals plain greedy decoding of that prompt alone (float64)."""
    engines = [make_engine(target, case, gamma=3) for case in ("draft_model", "mtp", "layer_skip", "ngram")]
    plain = Engine(target, EngineConfig(drafter="none"))
    prompts = [PROMPTS[0], PROMPTS[1], THIRD]
    decodings, expected = [], []
    for engine in engines:
        for prompt in prompts:
            decodings.append(engine.decoding(prompt, 20))
            expected.append(plain.generate(prompt, 20).tokens)
    results = decode_together(engines[0].runtime, decodings)
    assert [r.tokens for r in results] == expected
    assert all(r.stats.drafted > 0 for r in results)
