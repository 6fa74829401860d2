"""serving/stats.py: llama-server's per-request figures become the engine's statistics, identities included.

No binary needed: the replies, counters and log lines are written here in the server's own formats
(tools/server/server-common.cpp timings, server-task.cpp /metrics, server-context.cpp's trace line).
"""

from __future__ import annotations

import pytest

from engine.stats import GenerationStats
from serving.stats import DRAFTS, PER_POSITION, Step, accepted_per_position, parse_steps, request_stats

LOG = """slot update_slots: id  0 | task 5 | prompt done, n_tokens = 40, batch.n_tokens = 12
slot update_slots: id  0 | task 5 | accepted  2/ 4 draft tokens
srv  log_server_r: done request: POST /completion 127.0.0.1 200
slot update_slots: id  0 | task 5 | accepted  0/ 3 draft tokens
slot update_slots: id  0 | task 5 | accepted 12/12 draft tokens
"""


def metrics(drafts: int, per_position: list[int]) -> dict[str, float]:
    values = {DRAFTS: float(drafts)}
    values.update({f'{PER_POSITION}{{position="{i}"}}': float(n) for i, n in enumerate(per_position)})
    return values


def reply(tokens: int, **timings) -> dict:
    return {"tokens": list(range(tokens)), "timings": {"prompt_ms": 4.0, "predicted_ms": 20.0, **timings}}


def assert_identities(stats: GenerationStats) -> None:
    """The built-in engine's identities (tests/engine/test_conformance.py), for a server's figures."""
    assert stats.new_tokens == stats.accepted + stats.emitting_forwards
    assert stats.prompt_tokens == stats.reused_tokens + stats.prefilled_tokens
    assert sum(stats.drafted_per_position) == stats.drafted
    assert sum(stats.accepted_per_position) == stats.accepted
    assert sum(s["drafts"] for s in stats.per_drafter.values()) == stats.drafts
    assert sum(s["drafted"] for s in stats.per_drafter.values()) == stats.drafted
    assert sum(s["accepted"] for s in stats.per_drafter.values()) == stats.accepted


def test_trace_lines_are_read_in_order_and_other_lines_ignored():
    assert parse_steps(LOG) == [Step(2, 4), Step(0, 3), Step(12, 12)]
    assert parse_steps("no steps here\n") == []


def test_a_slot_s_steps_are_read_apart_from_the_other_slots():
    shared = LOG + "slot update_slots: id  1 | task 9 | accepted  1/ 2 draft tokens\n"
    assert parse_steps(shared, slot=1) == [Step(1, 2)]
    assert parse_steps(shared, slot=0) == [Step(2, 4), Step(0, 3), Step(12, 12)]


def test_a_shared_server_s_request_is_counted_from_its_reply_and_its_slot_alone():
    """Several agents at once: /metrics moved for other slots too, so it is not read; log and reply must agree."""
    answer = reply(30, prompt_n=12, cache_n=28, draft_n=19, draft_n_accepted=14)
    stats = request_stats(list(range(40)), answer, {}, {}, parse_steps(LOG, slot=0), 0.05, drafter="ngram", shared=True)
    assert (stats.drafts, stats.drafted, stats.accepted) == (3, 19, 14)
    assert_identities(stats)
    with pytest.raises(ValueError, match="disagree"):
        request_stats([1], answer, {}, {}, [Step(2, 4)], 0.05, drafter="ngram", shared=True)


def test_per_position_counter_is_a_list_with_missing_positions_zero():
    values = {f'{PER_POSITION}{{position="2"}}': 5.0, f'{PER_POSITION}{{position="0"}}': 9.0, DRAFTS: 3.0}
    assert accepted_per_position(values) == [9, 0, 5]
    assert accepted_per_position({DRAFTS: 1.0}) == []


def test_a_speculative_request_fills_every_count_and_keeps_the_identities():
    steps = parse_steps(LOG)
    before, after = metrics(10, [7, 5]), metrics(13, [9, 7] + [1] * 10)  # this request: +2, +2, then 1 x 10
    answer = reply(30, prompt_n=12, cache_n=28, draft_n=19, draft_n_accepted=14)
    stats = request_stats(list(range(40)), answer, before, after, steps, 0.05, drafter="ngram", peak_memory_bytes=7)
    assert (stats.drafts, stats.drafted, stats.accepted) == (3, 19, 14)
    assert stats.drafted_per_position == [3, 3, 3, 2] + [1] * 8
    assert stats.accepted_per_position == [2, 2] + [1] * 10
    assert (stats.prompt_tokens, stats.reused_tokens, stats.prefilled_tokens) == (40, 28, 12)
    assert stats.emitting_forwards == 30 - 14 and stats.new_tokens == 30
    assert stats.time_s["prefill"] == pytest.approx(0.004) and stats.time_s["verify"] == pytest.approx(0.020)
    assert stats.time_s["other"] == pytest.approx(0.05 - 0.024) and stats.peak_memory_bytes == 7
    assert stats.per_drafter["ngram"]["drafts"] == 3
    assert stats.mean_accepted_length == pytest.approx(1 + 14 / 3)
    assert_identities(stats)


def test_plain_decoding_has_no_drafts_and_counts_every_token_as_its_own_forward():
    answer = reply(8, prompt_n=5, cache_n=0)
    stats = request_stats([1, 2, 3, 4, 5], answer, metrics(0, []), metrics(0, []), [], 0.03, drafter="none")
    assert (stats.drafts, stats.drafted, stats.accepted, stats.emitting_forwards) == (0, 0, 0, 8)
    assert stats.per_drafter == {} and stats.drafted_per_position == []
    assert_identities(stats)


@pytest.mark.parametrize(
    "steps, after_drafts, answer",
    [
        ([Step(1, 2)], 2, reply(4, draft_n=2, draft_n_accepted=1)),  # /metrics saw a step the log did not
        ([Step(1, 2)], 1, reply(4, draft_n=3, draft_n_accepted=1)),  # the log drafted less than the reply says
        ([Step(1, 2)], 1, reply(4, draft_n=2, draft_n_accepted=2)),  # accepted differs
    ],
)
def test_sources_that_disagree_are_an_error_not_a_silent_number(steps, after_drafts, answer):
    with pytest.raises(ValueError, match="disagree"):
        request_stats([1], answer, metrics(0, []), metrics(after_drafts, []), steps, 0.01, drafter="ngram")


def test_a_per_position_counter_that_disagrees_with_the_log_is_an_error():
    with pytest.raises(ValueError, match="per-position"):
        request_stats(
            [1],
            reply(4, draft_n=2, draft_n_accepted=1),
            metrics(0, []),
            metrics(1, [0, 1]),
            [Step(1, 2)],
            0.01,
            drafter="ngram",
        )
