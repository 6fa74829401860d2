"""The scheduler: generations from several threads batched by one decode thread, each equal to its run alone."""

from __future__ import annotations

import threading

import pytest

from engine.decode import ContextLimitError
from engine.engine import Engine, EngineConfig
from engine.scheduler import Scheduler
from engine.testing import random_model

PROMPTS = [[5, 6, 7, 8, 9, 5, 6, 7], [11, 40, 3, 3, 17], [1, 2, 3, 1, 2, 3, 1], [60, 2, 90, 33]]


@pytest.fixture(scope="module")
def target():
    return random_model("llama", seed=7, forward="torch")


def _threads(fn, n: int) -> list:
    out: list = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            out[i] = fn(i)
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a caller never got its generation back"
    if errors:
        raise errors[0]
    return out


@pytest.mark.parametrize("drafter", ["none", "ngram", "suffix"])
def test_threads_get_what_they_would_alone_over_several_turns(target, drafter):
    plain = Engine(target, EngineConfig(drafter="none"))
    engine = Engine(target, EngineConfig(drafter=drafter, gamma=3))

    def agent(generate, session, i: int) -> list[list[int]]:
        """Three turns of one conversation, each extending the last (prefix reuse)."""
        prompt, replies = list(PROMPTS[i]), []
        for turn in range(3):
            replies.append(generate(prompt, 6 + 3 * i + turn, session).tokens)
            prompt = [*prompt, *replies[-1], 4, 4]
        return replies

    alone = [agent(lambda p, n, s: plain.generate(p, n, session=s), plain.new_session(), i) for i in range(4)]
    with Scheduler(engine) as scheduler:
        together = _threads(lambda i: agent(scheduler.generate, engine.new_session(), i), len(PROMPTS))
        assert max(scheduler.batch_sizes) > 1, "the threads' generations never shared a step"
    assert together == alone


def test_max_sessions_bounds_each_step_and_everyone_finishes(target):
    engine = Engine(target, EngineConfig(drafter="none"))
    with Scheduler(engine, max_sessions=2) as scheduler:
        results = _threads(lambda i: scheduler.generate(PROMPTS[i], 12, engine.new_session()), len(PROMPTS))
        assert max(scheduler.batch_sizes) <= 2
    assert all(len(r.tokens) == 12 or r.finish_reason == "eos" for r in results)


def test_a_bad_request_fails_alone(target):
    engine = Engine(target, EngineConfig(drafter="none"))
    with Scheduler(engine) as scheduler:

        def call(i: int):
            prompt = [1] * 600 if i == 0 else PROMPTS[i]  # random_model's context is 512
            try:
                return scheduler.generate(prompt, 5, engine.new_session())
            except ContextLimitError as exc:
                return exc

        results = _threads(call, 3)
    assert isinstance(results[0], ContextLimitError)
    assert all(len(r.tokens) == 5 or r.finish_reason == "eos" for r in results[1:])


def test_closed_scheduler_refuses_and_its_thread_ends(target):
    engine = Engine(target, EngineConfig(drafter="none"))
    scheduler = Scheduler(engine)
    scheduler.generate(PROMPTS[0], 3, engine.new_session())
    scheduler.close()
    assert not scheduler._thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        scheduler.generate(PROMPTS[0], 3, engine.new_session())
