"""Several agents at once (`run.concurrency=N`): one side's tasks run by N agent threads, and what it yields.

A wave is one side's pass over one repeat's tasks: N worker threads take tasks from a queue in suite order,
each runs a whole agent episode (its tool calls in its own sandbox), and every model call goes to the side's
one decoder: the engine's scheduler, which batches the agents' turns (engine/scheduler.py), or one
llama-server with N slots. OFF and ON run their waves one after the other at the same N, and take turns going
first (repeat r: OFF first when r is even). The wave's wall time gives the headline figure of the seeds' load
test, correct tasks per minute (aggregate throughput), beside seconds per success per agent and the latency of
single model requests (percentiles over every turn of the wave).

A second Ctrl-C (KeyboardInterrupt in the main thread) sets `abort`: every agent's next model call raises
KeyboardInterrupt in its thread, so its episode ends (sandbox closed) and the wave's threads are joined
before the interrupt goes on: nothing a wave started outlives it.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agents.model import ModelReply
from agents.recording import PassThroughModel
from runners.outcomes import SideRun

PERCENTILES = (50, 90, 99)


@dataclass
class Wave:
    """One side's tasks of one repeat, run by `agents` agents at once."""

    side: str  # baseline | candidate
    repeat: int
    agents: int  # agents in flight at once (run.concurrency)
    wall_s: float = 0.0  # from the first task handed out to the last one graded
    runs: list[SideRun] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)  # wall seconds of every model request

    @property
    def successes(self) -> int:
        """Tasks resolved in this wave."""
        return sum(r.success for r in self.runs)

    def correct_per_minute(self) -> float | None:
        """Resolved tasks per wall minute of the wave (aggregate throughput)."""
        return self.successes / (self.wall_s / 60.0) if self.wall_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the wave's figures (not its runs: they are in the per-task rows)."""
        return {
            "side": self.side,
            "repeat": self.repeat,
            "agents": self.agents,
            "wall_s": self.wall_s,
            "tasks": len(self.runs),
            "successes": self.successes,
            "correct_tasks_per_minute": self.correct_per_minute(),
            "latency_s": percentiles(self.latencies_s),
        }


class AbortableModel(PassThroughModel):
    """Raises KeyboardInterrupt at the next model call once `abort` is set (ends the agent's episode)."""

    def __init__(self, inner: Any, abort: threading.Event, latencies: list[float]) -> None:
        super().__init__(inner)
        self.abort, self.latencies = abort, latencies

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        """The inner reply, timed into `latencies`; KeyboardInterrupt when the run is being stopped."""
        if self.abort.is_set():
            raise KeyboardInterrupt("the run is stopping")
        t0 = time.perf_counter()
        out = self.inner.reply(prompt_ids, messages, max_new_tokens)
        self.latencies.append(time.perf_counter() - t0)  # list.append is atomic: threads share the list
        return out


def run_wave(
    wave: Wave,
    tasks: list[Any],
    episode: Callable[[Any], SideRun],
    abort: threading.Event,
    on_done: Callable[[Wave, SideRun, int, int], None] | None = None,
) -> Wave:
    """Run `episode(task)` for every task with `wave.agents` threads; fills the wave's runs (in task order) and wall.

    `on_done(wave, run, finished, total)` is called as each episode finishes (on its thread): progress.
    """
    t0 = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=wave.agents, thread_name_prefix=f"agent-{wave.side}")
    finished = [0]
    lock = threading.Lock()

    def report(future: Any) -> None:
        if on_done is None or future.cancelled() or future.exception() is not None:
            return
        with lock:
            finished[0] += 1
            on_done(wave, future.result(), finished[0], len(tasks))

    try:
        futures = [pool.submit(episode, task) for task in tasks]
        for future in futures:
            future.add_done_callback(report)
        wave.runs = [f.result() for f in futures]
    except BaseException:
        abort.set()  # the agents' next model calls end their episodes
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    wave.wall_s = time.perf_counter() - t0
    return wave


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50 / p90 / p99 of `values` (None when empty)."""
    if not values:
        return {f"p{p}": None for p in PERCENTILES}
    if len(values) == 1:
        return {f"p{p}": values[0] for p in PERCENTILES}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {f"p{p}": cuts[p - 1] for p in PERCENTILES}


def concurrency_summary(waves: list[Wave]) -> dict[str, Any]:
    """Per side: correct tasks per minute by repeat and their median, request latency; ON/OFF throughput per repeat."""
    if not waves:
        return {}
    sides: dict[str, Any] = {}
    for side in ("baseline", "candidate"):
        mine = [w for w in waves if w.side == side]
        if not mine:
            continue
        rates = [w.correct_per_minute() for w in mine]
        successes = sum(w.successes for w in mine)
        agent_time = sum(r.time_s for w in mine for r in w.runs)
        sides[side] = {
            "correct_tasks_per_minute": statistics.median(r or 0.0 for r in rates),
            "correct_tasks_per_minute_repeats": rates,
            "seconds_per_success_per_agent": agent_time / successes if successes else None,
            "latency_s": percentiles([x for w in mine for x in w.latencies_s]),
            "wall_s": [w.wall_s for w in mine],
        }
    ratios = []
    for w in waves:
        if w.side != "candidate":
            continue
        off = next((b for b in waves if b.side == "baseline" and b.repeat == w.repeat), None)
        if off is not None and off.wall_s > 0 and w.wall_s > 0:
            ratios.append(off.wall_s / w.wall_s)  # same tasks at the same N: the throughput ratio
    return {
        "agents": waves[0].agents,
        "sides": sides,
        "throughput_ratio_repeats": ratios,  # OFF wave wall / ON wave wall, per repeat
        "throughput_ratio": statistics.median(ratios) if ratios else None,
        "waves": [w.to_dict() for w in waves],
    }
