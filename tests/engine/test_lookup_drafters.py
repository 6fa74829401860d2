"""Behaviour of the lookup drafters (ngram, suffix) and their index, without models."""

from __future__ import annotations

from engine.drafters import DraftContext, DrafterResources
from engine.drafters.ngram import NgramDrafter, NgramOptions
from engine.drafters.suffix import SuffixDrafter, SuffixOptions
from engine.drafters.token_index import TokenIndex
from engine.sampling import SamplingParams


def ctx(history: list[int], n: int = 4) -> DraftContext:
    return DraftContext(history=history, max_tokens=n, params=SamplingParams(), generator=None)


def resources(shared=None) -> DrafterResources:
    return DrafterResources(target=None, shared=shared)  # lookup drafters never touch the target


def test_ngram_copies_most_recent_longest_match():
    d = NgramDrafter(NgramOptions(min_match=1, max_match=3), resources())
    history = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3]
    d.begin(history)
    # "2 3" occurs twice before the end; the most recent earlier one is followed by 7 8 5 2
    assert d.propose(ctx(history)).tokens == [7, 8, 5, 2]


def test_ngram_overlapping_copy_continues_a_repetition():
    d = NgramDrafter(NgramOptions(), resources())
    history = [5, 317, 317, 317, 317, 317]
    d.begin(history)
    assert d.propose(ctx(history)).tokens == [317, 317, 317, 317]
    periodic = [4, 1, 2, 3, 1, 2, 3, 1]
    d.begin(periodic)
    assert d.propose(ctx(periodic, 5)).tokens == [2, 3, 1, 2, 3]


def test_ngram_no_match_no_draft_and_rebuild_on_divergence():
    d = NgramDrafter(NgramOptions(min_match=2), resources())
    d.begin([1, 2, 3, 4])
    assert d.propose(ctx([1, 2, 3, 4])).tokens == []
    rewritten = [9, 8, 9, 8, 9]  # a new turn rewrote the history: the index must not keep 1 2 3 4
    d.begin(rewritten)
    assert d.propose(ctx(rewritten, 2)).tokens == [8, 9]
    assert 1 not in d._mirror.index.tokens


def test_suffix_prefers_frequent_continuation():
    d = SuffixDrafter(SuffixOptions(min_match=2, scope="session", min_token_prob=0.0), resources())
    history = [3, 1, 2, 5, 3, 1, 2, 5, 3, 1, 2, 6, 3, 1, 2]
    d.begin(history)
    assert d.propose(ctx(history, 1)).tokens == [5]  # 5 followed "3 1 2" twice, 6 once
    deeper = [7, 3, 1, 2, 6, 3, 1, 2, 5, 3, 1, 2, 5, 7, 3, 1, 2]
    d.begin(deeper)
    assert d.propose(ctx(deeper, 1)).tokens == [6]  # the longest match ("7 3 1 2") wins over frequency


def test_suffix_min_token_prob_stops_uncertain_drafts():
    d = SuffixDrafter(SuffixOptions(min_match=2, scope="session", min_token_prob=0.9), resources())
    history = [3, 1, 2, 5, 3, 1, 2, 6, 3, 1, 2]
    d.begin(history)
    assert d.propose(ctx(history)).tokens == []  # 50/50 continuation < 0.9


def test_suffix_draft_length_grows_with_match_length():
    opts = SuffixOptions(min_match=2, scope="session", match_factor=1.0, min_token_prob=0.0)
    seq = [10, 11, 12, 13, 14, 15, 16, 17]
    short = SuffixDrafter(opts, resources())
    h1 = [*seq, 99, 12, 13]  # matches "12 13": 2 tokens -> at most 2 drafted
    short.begin(h1)
    assert short.propose(ctx(h1, 8)).tokens == [14, 15]
    long = SuffixDrafter(opts, resources())
    h2 = [*seq, 99, 10, 11, 12, 13]  # matches 4 tokens -> at most 4 drafted
    long.begin(h2)
    assert long.propose(ctx(h2, 8)).tokens == [14, 15, 16, 17]


def test_suffix_scope_and_reset_isolate_generations():
    opts = SuffixOptions(min_match=2, scope="engine", min_token_prob=0.0)
    shared = SuffixDrafter.shared_state(opts)
    first = SuffixDrafter(opts, resources(shared))
    first.begin([1, 2])
    first.end([1, 2, 30, 31, 32, 33], generated=[30, 31, 32, 33])  # a finished generation
    other = SuffixDrafter(opts, resources(shared))
    other.begin([7, 30, 31])
    assert other.propose(ctx([7, 30, 31], 2)).tokens == [32, 33], "engine scope must see earlier generations"
    isolated = SuffixDrafter(SuffixOptions(min_match=2, scope="session"), resources(shared))
    isolated.begin([7, 30, 31])
    assert isolated.propose(ctx([7, 30, 31], 2)).tokens == [], "session scope must not"
    shared.reset()
    other.begin([7, 30, 31])
    assert other.propose(ctx([7, 30, 31], 2)).tokens == [], "reset must forget earlier generations"


def test_token_index_never_matches_across_streams():
    index = TokenIndex(key_len=1)
    index.append([1, 2, 3])
    index.new_stream()
    index.append([4, 5])
    match = index.longest_match([3, 4], max_match=4)
    assert match.length == 1  # "3 4" spans the boundary: only "4" matches
    assert index.successor(len(index.tokens) - 1) is None
