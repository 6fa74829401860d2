"""The conformance suite, batched: sessions decoded together equal each session decoded alone.

For every target and forward path of the conformance suite and every drafter case, three sessions run
through one Batch: two start together, a third joins after a few steps, one leaves early (a smaller token
budget), and a second turn per session rolls back (a diverging prompt crops the KV) or extends (prefix
reuse) while the others are mid-generation. In float64 every session's stream equals plain greedy decoding
of the same session alone, token for token; its KV cache equals a fresh recomputation of its history; its
statistics add up as they do alone. On the engine's own Llama forward the batch is one ragged forward
(LlamaForward.many), counted here by the forward's observers; transformers' forward serves a batch's
sessions one at a time.
"""

from __future__ import annotations

import pytest
import torch
from test_conformance import (
    DRAFTER_CASES,
    PROMPTS,
    TARGETS,
    assert_identities,
    assert_kv_matches_fresh,
    build_target,
    make_engine,
)

from engine.batch import Batch, decode_together
from engine.engine import Engine, EngineConfig
from engine.forward import EngineForward
from engine.testing import random_model

THIRD = [*PROMPTS[0][:7], 3, 4, 50, 51]  # shares a prefix with PROMPTS[0]: a lookup drafter's index sees both


# Every path that batches for real (the engine's forward) and transformers' one-at-a-time service on a full-
# attention and a mixed sliding/full target: the conformance suite covers every target alone.
BATCH_TARGETS = [t for t in TARGETS if t[1] != "transformers" or t[0] in ("llama", "gemma3")]
_ALONE: dict[tuple, list[list[int]]] = {}


@pytest.fixture(scope="module", params=BATCH_TARGETS, ids=[f"{a}-{p}" for a, p in BATCH_TARGETS])
def target(request):
    return build_target(*request.param)


def alone(target, turns: list[tuple[list[int] | None, int]]) -> list[list[int]]:
    """Plain greedy, one session alone: each turn's prompt (None: the history so far + [1, 2]) and budget."""
    key = (target.model.config.model_type, target.forward.choice.path, repr(turns))
    if key not in _ALONE:
        _ALONE[key] = _alone(target, turns)
    return _ALONE[key]


def _alone(target, turns: list[tuple[list[int] | None, int]]) -> list[list[int]]:
    engine = Engine(target, EngineConfig(drafter="none"))
    session = engine.new_session()
    out = []
    for prompt, budget in turns:
        prompt = prompt if prompt is not None else [*session.history, 1, 2]
        out.append(engine.generate(prompt, budget, session=session).tokens)
    return out


@pytest.mark.parametrize("case", list(DRAFTER_CASES))
def test_batched_sessions_equal_each_session_alone(target, case):
    engine = make_engine(target, case, gamma=4)
    sessions = [engine.new_session() for _ in range(3)]
    first = [(PROMPTS[0], 40), (PROMPTS[1], 12), (THIRD, 30)]  # session 1 leaves early
    batch = Batch(engine.runtime)
    decodings = [engine.decoding(p, n, sessions[i]) for i, (p, n) in enumerate(first[:2])]
    for d in decodings:
        batch.join(d)
    steps = 0
    while batch.active:
        if steps == 3:  # a join between steps
            decodings.append(engine.decoding(first[2][0], first[2][1], sessions[2]))
            batch.join(decodings[-1])
        batch.step()
        steps += 1
    results = [d.result() for d in decodings]
    # second turns together: session 0 diverges (rollback into its KV), sessions 1 and 2 extend theirs
    diverged = [*sessions[0].history[: len(PROMPTS[0]) + 9], 70, 71]
    second = [(diverged, 20), (None, 25), (None, 15)]
    prompts = [p if p is not None else [*s.history, 1, 2] for (p, _), s in zip(second, sessions, strict=True)]
    again = [engine.decoding(p, n, s) for p, (_, n), s in zip(prompts, second, sessions, strict=True)]
    results2 = decode_together(engine.runtime, again)

    for i in range(3):
        expected = alone(target, [first[i], second[i] if i else (diverged, 20)])
        got = [results[i].tokens, results2[i].tokens]
        assert got == expected, f"{case}: session {i} in a batch diverged from the same session alone"
        for r in (results[i], results2[i]):
            assert_identities(r.stats)
            assert not r.lossy
        assert_kv_matches_fresh(target, sessions[i])
    assert results2[0].stats.reused_tokens < len(sessions[0].history)  # the diverging turn really cropped


def test_one_ragged_forward_per_batch_step():
    """On the engine's forward a batch step is one forward call covering every session's fed tokens."""
    model = random_model("llama", seed=7, forward="torch")
    forward = model.forward
    assert isinstance(forward, EngineForward)
    engine = Engine(model, EngineConfig(drafter="ngram", gamma=3))
    calls: list[int] = []
    original = type(forward).__mro__[1].many  # LlamaForward.many: the single ragged forward

    def counting(self, caches, feeds, keeps, hidden=False):
        calls.append(len(caches))
        return original(self, caches, feeds, keeps, hidden)

    type(forward).__mro__[1].many, restore = counting, original
    try:
        results = engine.generate_together([PROMPTS[0], PROMPTS[1], THIRD], 20)
    finally:
        type(forward).__mro__[1].many = restore
    # sessions in step t: those that had more than t target forwards; a step of one session is a plain call
    active = [sum(r.stats.target_forwards > t for r in results) for t in range(20)]
    assert calls == [n for n in active if n > 1] and calls[0] == 3, (calls, active)


def test_a_session_cannot_join_twice_or_finished():
    engine = Engine(random_model("llama", seed=7, forward="torch"), EngineConfig(drafter="none"))
    session = engine.new_session()
    batch = Batch(engine.runtime)
    batch.join(engine.decoding(PROMPTS[0], 3, session))
    with pytest.raises(ValueError, match="twice"):
        batch.join(engine.decoding(PROMPTS[1], 3, session))
    other = engine.decoding(PROMPTS[1], 1)
    decode_together(engine.runtime, [other])
    with pytest.raises(ValueError, match="finished"):
        batch.join(other)


def test_ragged_forward_rows_equal_single_forwards():
    """LlamaForward.many's logits and trunk rows for each session equal that session's own forward (float64)."""
    forward = random_model("qwen2", seed=3, forward="torch").forward
    caches = [forward.new_cache() for _ in range(3)]
    singles = [forward.new_cache() for _ in range(3)]
    histories = [[5, 6, 7, 8, 9, 10], [11, 40, 3], [1]]
    for c, s, h in zip(caches, singles, histories, strict=True):
        forward(c, h[:-1] or [h[0]], keep=1)
        forward(s, h[:-1] or [h[0]], keep=1)
    feeds, keeps = [[9, 1, 2], [3], [4, 5, 6, 7, 8]], [3, 1, 2]
    batched = forward.many(caches, feeds, keeps, hidden=True)
    for (logits, hidden), s, f, k in zip(batched, singles, feeds, keeps, strict=True):
        want_logits, want_hidden = forward(s, f, keep=k, hidden=True)
        torch.testing.assert_close(logits, want_logits, atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(hidden, want_hidden, atol=1e-10, rtol=1e-10)
    assert [c.length for c in caches] == [s.length for s in singles]
