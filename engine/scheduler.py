"""Continuous batching for callers on several threads: one engine, one decode thread, one Batch.

Each agent runs in its own thread and calls `Scheduler.generate` as it would call `Engine.generate`; the
call queues a request and blocks. The scheduler's thread owns the engine: between batch steps it starts
every queued request's Decoding (prefix reuse, the drafter's turn start) and lets it join the Batch, then
steps the batch (one target forward for every active session) and hands each finished generation back to
its caller. A request that cannot start (a prompt past the context) fails alone; an error inside a step
fails every generation of that step, and the scheduler goes on serving new requests.

Fairness: every active session advances one step per batch step, so none starves; with `max_sessions`
set, requests wait in arrival order until a place frees up (tested in tests/engine/test_scheduler.py).
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from engine.batch import Batch
from engine.decode import Decoding, GenerationResult
from engine.engine import Engine
from engine.session import Session


@dataclass
class _Request:
    session: Session
    prompt: list[int]
    max_new_tokens: int
    stop_tokens: frozenset[int] | None
    future: Future = field(default_factory=Future)


class Scheduler:
    """Serves `generate` calls from any number of threads through one batched decode loop on `engine`."""

    def __init__(self, engine: Engine, max_sessions: int | None = None) -> None:
        if max_sessions is not None and max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1 or None, got {max_sessions}")
        self.engine = engine
        self.max_sessions = max_sessions
        self.steps = 0  # batch steps run
        self.batch_sizes: list[int] = []  # sessions in each step (the batch size a step saw)
        self.generations = 0  # generations served
        self.tokens = 0  # tokens they emitted
        self._inbox: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._waiting: deque[_Request] = deque()
        self._running: dict[int, tuple[_Request, Decoding]] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="spectune-scheduler", daemon=True)
        self._thread.start()

    def generate(
        self,
        prompt: list[int],
        max_new_tokens: int,
        session: Session,
        stop_tokens: frozenset[int] | None = None,
    ) -> GenerationResult:
        """Continue `session` with `prompt`, batched with every other caller's generation; blocks until done."""
        if self._closed:
            raise RuntimeError("the scheduler is closed")
        request = _Request(session, list(prompt), max_new_tokens, stop_tokens)
        self._inbox.put(request)
        return request.future.result()

    def close(self) -> None:
        """Stop the decode thread once the generations in flight have finished."""
        if not self._closed:
            self._closed = True
            self._inbox.put(None)
            self._thread.join()

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the decode thread --

    def _serve(self) -> None:
        batch = Batch(self.engine.runtime)
        stopping = False
        while True:
            # Idle: block for the next request; busy: take what has arrived and keep stepping.
            stopping = self._collect(block=not batch.active and not self._waiting) or stopping
            self._admit(batch)
            if batch.active:
                self._step(batch)
            elif stopping and not self._waiting:
                return

    def _collect(self, block: bool) -> bool:
        """Move arrived requests to the waiting line; True once close() was asked."""
        stop = False
        try:
            item = self._inbox.get() if block else self._inbox.get_nowait()
            while True:
                if item is None:
                    stop = True
                else:
                    self._waiting.append(item)
                item = self._inbox.get_nowait()
        except queue.Empty:
            pass
        return stop

    def _admit(self, batch: Batch) -> None:
        """Start waiting requests, in arrival order, while the batch has room."""
        busy = {id(d.session) for d in batch.active}
        while self._waiting and (self.max_sessions is None or len(batch.active) < self.max_sessions):
            request = self._waiting[0]
            if id(request.session) in busy:  # the same session's earlier turn is still decoding
                break
            self._waiting.popleft()
            try:
                with torch.inference_mode():
                    decoding = self.engine.decoding(
                        request.prompt, request.max_new_tokens, request.session, request.stop_tokens
                    )
            except Exception as exc:  # the caller's request fails, the scheduler goes on
                request.future.set_exception(exc)
                continue
            batch.join(decoding)
            busy.add(id(request.session))
            self._running[id(decoding)] = (request, decoding)

    def _step(self, batch: Batch) -> None:
        self.batch_sizes.append(len(batch.active))
        self.steps += 1
        try:
            finished = batch.step()
        except Exception as exc:  # every generation of this step fails; new requests are served
            for request, _ in self._running.values():
                request.future.set_exception(exc)
            self._running.clear()
            batch.active.clear()
            return
        for decoding in finished:
            request, _ = self._running.pop(id(decoding))
            try:
                result = decoding.result()
                self.generations += 1
                self.tokens += len(result.tokens)
                request.future.set_result(result)
            except Exception as exc:
                request.future.set_exception(exc)
