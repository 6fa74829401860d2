"""The ports of llama.cpp's lookups (`ngram_cache`, `ngram_map_k`): what they draft, and the conformance
invariants on one target.

Their semantics are the pinned llama.cpp's (engine/drafters/ngram_cache.py, ngram_map_k.py), including the
choices that make them differ from spectune's own lookups; bench crossengine compares their acceptance with
the real server's. The conformance cases run on the engine's own Llama forward only (float64, alone and
batched with a join, an early leave, a rollback and a prefix reuse): the full suite's other targets test
the engine, not the drafter, and cost CI minutes.
"""

from __future__ import annotations

import pytest
from test_batched_conformance import test_batched_sessions_equal_each_session_alone as batched_equals_alone
from test_conformance import DRAFTER_CASES, MAX_NEW, PROMPTS, assert_identities, assert_kv_matches_fresh, build_target

from engine.drafters import DraftContext, DrafterResources, Verified
from engine.drafters.ngram_cache import NgramCacheDrafter, NgramCacheOptions
from engine.drafters.ngram_map_k import NgramMapKDrafter, NgramMapKOptions
from engine.engine import Engine, EngineConfig
from engine.sampling import SamplingParams

# a short key and m-gram, so the 13-token repetitive prompt has key positions with size_m tokens after them
CASES = {"ngram_cache": {}, "ngram_map_k": {"size_n": 1, "size_m": 3}}


def ctx(history: list[int], n: int = 8) -> DraftContext:
    return DraftContext(history=history, max_tokens=n, params=SamplingParams(), generator=None)


def resources() -> DrafterResources:
    return DrafterResources(target=None)  # lookup drafters never touch the target


# ngram_cache


def test_ngram_cache_drafts_from_the_longest_qualifying_ngram_and_extends_its_own_draft():
    d = NgramCacheDrafter(NgramCacheOptions(), resources())
    # one sighting suffices for a 3- or 4-gram (lax thresholds 1, 1): "1 2 3" -> 4, then the draft's own tail
    assert d.propose(ctx([1, 2, 3, 4, 1, 2, 3])).tokens == [4, 1, 2, 3, 4, 1, 2, 3]  # capped at max_draft 8
    short = NgramCacheDrafter(NgramCacheOptions(max_draft=3), resources())
    assert short.propose(ctx([1, 2, 3, 4, 1, 2, 3])).tokens == [4, 1, 2]
    assert short.propose(ctx([1, 2, 3, 4, 1, 2, 3], n=2)).tokens == [4, 1]  # and at the step's budget


def test_ngram_cache_needs_two_dominant_sightings_for_a_single_token_key():
    # "5" was followed once by 6: a 1-gram needs 2 sightings; nothing longer matches the end "9 5"
    assert NgramCacheDrafter(NgramCacheOptions(), resources()).propose(ctx([5, 6, 7, 9, 5])).tokens == []
    # twice by 6: drafted (2 of 2 = 100 % >= 66 %)
    assert NgramCacheDrafter(NgramCacheOptions(), resources()).propose(ctx([5, 6, 5, 6, 9, 5])).tokens[:1] == [6]
    # 6, 6, 7: 2 of 3 = 66.7 % >= 66 %, still drafted; 6, 7: 50 % < 66 %, not
    assert NgramCacheDrafter(NgramCacheOptions(), resources()).propose(ctx([5, 6, 5, 6, 5, 7, 9, 5])).tokens[:1] == [6]
    assert NgramCacheDrafter(NgramCacheOptions(), resources()).propose(ctx([5, 6, 5, 7, 9, 5])).tokens == []


def test_ngram_cache_counts_each_new_chunk_alone_as_llama_cpp_does():
    d = NgramCacheDrafter(NgramCacheOptions(), resources())
    assert d.propose(ctx([1, 2, 3])).tokens == []
    assert d.propose(ctx([1, 2, 3, 4, 5])).tokens == []  # chunk "4 5": "1 2 3" -> 4 spans two chunks, uncounted
    # the next chunk "1 2 3" ends the history: nothing ever followed "1 2 3" inside one chunk
    assert d.propose(ctx([1, 2, 3, 4, 5, 1, 2, 3])).tokens == []
    whole = NgramCacheDrafter(NgramCacheOptions(), resources())
    assert whole.propose(ctx([1, 2, 3, 4, 5, 1, 2, 3])).tokens[:2] == [4, 5]  # counted as one chunk it drafts


# ngram_map_k


def test_ngram_map_k_keeps_the_first_indexed_position_of_a_key():
    d = NgramMapKDrafter(NgramMapKOptions(size_n=1, size_m=1), resources())
    d.begin([])
    first = [0, 5, 6, 0, 0, 0, 7]
    assert d.propose(ctx(first)).tokens == []  # "7" unseen; positions 1..3 get indexed ("5" at 1)
    later = [*first, 5, 8, 0, 0, 5]
    # "5" also sits at 7 (followed by 8, and more recent), but the map keeps position 1: 6, where ngram says 8
    assert d.propose(ctx(later)).tokens == [6]


def test_ngram_map_k_drafts_what_the_key_got_accepted_last_time():
    d = NgramMapKDrafter(NgramMapKOptions(size_n=1, size_m=3), resources())
    history = [0, 4, 1, 2, 3, 9, 9, 9, 9, 4]
    d.begin([])
    assert d.propose(ctx(history)).tokens == [1, 2, 3]  # a new key drafts size_m tokens
    d.commit(Verified(history=[*history, 1, 7], added=2))  # one of three accepted
    assert d.propose(ctx([*history, 1, 7, 4])).tokens == [1]
    d.commit(Verified(history=[*history, 1, 7, 4, 8], added=1))  # none accepted: the key is silent from now on
    assert d.propose(ctx([*history, 1, 7, 4, 8, 4])).tokens == []


def test_ngram_map_k_waits_for_enough_history():
    d = NgramMapKDrafter(NgramMapKOptions(size_n=2, size_m=4), resources())
    d.begin([])
    assert d.propose(ctx([1, 2, 3, 4, 5, 6, 7, 1, 2])).tokens == []  # 8 tokens < 2 n + m


# conformance on one target


@pytest.fixture(scope="module")
def target():
    return build_target("llama", "torch")


def two_turns(engine: Engine, prompt: list[int]) -> tuple[object, list]:
    """A session of two turns: the prompt, then the history with the first reply quoted again (as an agent quotes
    a file it wrote): llama.cpp's ngram-cache counts only each call's new tokens among themselves, so a reply
    decoded a token or two at a time is never counted, and it drafts from what a new turn's prompt brings."""
    session = engine.new_session()
    first = engine.generate(prompt, MAX_NEW, session=session)
    second = engine.generate([*session.history, *first.tokens], MAX_NEW, session=session)
    return session, [first, second]


@pytest.fixture(scope="module")
def reference(target):
    engine = Engine(target, EngineConfig(drafter="none"))
    return [[r.tokens for r in two_turns(engine, p)[1]] for p in PROMPTS]


@pytest.fixture
def cases(monkeypatch):
    """The two drafters as conformance cases, for the batched check (which looks cases up by name)."""
    for name, options in CASES.items():
        monkeypatch.setitem(DRAFTER_CASES, name, (name, None, options))


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
def test_greedy_equals_plain(target, reference, case, gamma):
    engine = Engine(target, EngineConfig(drafter=case, gamma=gamma, options=dict(CASES[case])))
    drafted = 0
    for prompt, ref in zip(PROMPTS, reference, strict=True):
        session, results = two_turns(engine, prompt)
        assert [r.tokens for r in results] == ref, f"{case} gamma={gamma} diverged from plain greedy"
        for result in results:
            assert_identities(result.stats)
            drafted += result.stats.drafted
        assert_kv_matches_fresh(target, session)
    assert drafted > 0, f"{case} never drafted"


@pytest.mark.parametrize("case", list(CASES))
def test_stop_token_edge(target, reference, case):
    engine = Engine(target, EngineConfig(drafter=case, gamma=4, options=dict(CASES[case])))
    plain = reference[0][0]
    stop = plain[13]
    result = engine.generate(PROMPTS[0], MAX_NEW, stop_tokens=frozenset({stop}))
    assert result.tokens == plain[: plain.index(stop) + 1] and result.finish_reason == "eos"
    assert_identities(result.stats)


@pytest.mark.parametrize("case", list(CASES))
def test_batched_equals_alone(target, case, cases):
    batched_equals_alone(target, case)


def test_the_slot_outlives_a_session_as_on_a_one_slot_server():
    """The engine's one slot keeps the counts across sessions, and a shorter history adds nothing to them."""
    slot = NgramCacheDrafter.shared_state(None)
    first = NgramCacheDrafter(NgramCacheOptions(), DrafterResources(target=None, shared=slot))
    assert first.propose(ctx([1, 2, 3, 4, 1, 2, 3]))
    second = NgramCacheDrafter(NgramCacheOptions(), DrafterResources(target=None, shared=slot))
    assert second.propose(ctx([9, 1, 2, 3])).tokens[:1] == [4]  # the first session's counts draft
    assert slot.size == 7  # the 4-token history was not counted: the slot had counted 7
    slot.reset()  # a fresh server (Engine.reset_drafter_state)
    assert second.propose(ctx([9, 1, 2, 3])).tokens == []

    maps = NgramMapKDrafter.shared_state(None)
    one = NgramMapKDrafter(NgramMapKOptions(size_n=1, size_m=1), DrafterResources(target=None, shared=maps))
    one.begin([])
    one.propose(ctx([0, 5, 6, 0, 0, 0, 7]))  # indexes "5" at position 1
    other = NgramMapKDrafter(NgramMapKOptions(size_n=1, size_m=1), DrafterResources(target=None, shared=maps))
    other.begin([0, 8, 8, 8, 8, 8])  # another task: position 1 now holds 8, so the remembered "5" is stale
    assert other.propose(ctx([0, 8, 8, 8, 8, 8, 3, 5])).tokens == []
