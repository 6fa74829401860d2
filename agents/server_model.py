"""ServerModel: the AgentModel that generates with a running llama-server, one prompt cache per task.

The agent hands over token ids and gets token ids back (`/completion` with `"prompt": [ids]` and
`return_tokens`), so the server's own text tokenisation never matters. A task's first turn sends
`cache_prompt: false`, so it starts from an empty KV as an engine session does; later turns send
`cache_prompt: true` and the server reuses the KV of the common prefix, which its `cache_n` figure
counts. Statistics come from the server's own figures (serving/stats.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agents.model import ModelReply
from serving.llama_server import LlamaServer
from serving.stats import DRAFTS, Step, parse_steps, request_stats

STEP_WAIT_S = 5.0  # how long the server's log may lag behind its reply


class ServerModel:
    """Generates each turn through one slot of a llama-server, greedy or with the given sampling."""

    def __init__(
        self,
        server: LlamaServer,
        tokenizer: Any,
        name: str,
        *,
        drafter: str,
        context_limit: int,
        stop_tokens: frozenset[int],
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        slot: int = 0,
        shared: bool = False,
        release: Callable[[], None] | None = None,
    ) -> None:
        self.server = server
        self.tokenizer = tokenizer
        self.name = name
        self.drafter = drafter  # credited in per_drafter (the spectune name the server's flags came from)
        self.context_limit = context_limit  # the server's -c
        self.stop_tokens = stop_tokens
        self.sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p}
        self.seed = seed  # sampling seed of the task (turn t sends seed + t)
        self.lossy = False  # llama-server verifies losslessly
        self.slot = slot  # the server slot this task's requests use (its KV holds this task's prefix)
        # Several agents share the server (-np N): /metrics moves for every slot, so a request's figures come
        # from its reply and its slot's log lines alone (serving/stats.request_stats, shared=True).
        self.shared = shared
        self._release = release  # gives the slot back when the task ends
        self._turn = 0
        # /metrics after the previous turn: within a task nothing else uses the server (one slot, one agent),
        # so it is this turn's "before" and one request per turn is saved
        self._metrics: dict[str, float] | None = None

    def begin(self, instance_id: str) -> None:
        """A new task: its first request recomputes the whole prompt (no KV carried over from another task)."""
        self._turn = 0
        self._metrics = None

    def body(self, prompt_ids: list[int], max_new_tokens: int) -> dict[str, Any]:
        """The `/completion` request of one turn."""
        return {
            "prompt": list(prompt_ids),
            "n_predict": max_new_tokens,
            "cache_prompt": self._turn > 0,
            "id_slot": self.slot,
            "return_tokens": True,
            "stream": False,
            "seed": self.seed + self._turn,
            "min_p": 0.0,  # llama.cpp's default 0.05 is not spectune's
            **self.sampling,
        }

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        """One turn through the server; only `prompt_ids` is used."""
        before: dict[str, float] = {}
        if not self.shared:
            before = self._metrics if self._metrics is not None else self.server.metrics()
        offset = self.server.log_size()
        t0 = time.perf_counter()
        answer = self.server.post("/completion", self.body(prompt_ids, max_new_tokens))
        wall = time.perf_counter() - t0
        self._turn += 1
        if self.shared:
            after: dict[str, float] = {}
            steps = self._slot_steps(offset, int((answer.get("timings") or {}).get("draft_n", 0)))
        else:
            after = self._metrics = self.server.metrics()
            steps = self._steps(offset, before, after)
        stats = request_stats(
            prompt_ids,
            answer,
            before,
            after,
            steps,
            wall,
            drafter=self.drafter,
            peak_memory_bytes=self.server.peak_memory_bytes(),
            shared=self.shared,
        )
        tokens = [int(t) for t in answer.get("tokens") or []]
        eos = bool(tokens) and tokens[-1] in self.stop_tokens
        finish = "eos" if eos else "length"
        body = tokens[:-1] if eos else tokens
        text = self.tokenizer.decode(body, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return ModelReply(tokens=tokens, text=text, finish_reason=finish, stats=stats, wall_s=wall)

    def _steps(self, offset: int, before: dict[str, float], after: dict[str, float]) -> list[Step]:
        """This request's logged verification steps, waiting briefly for the log to catch up with /metrics."""
        want = int(after.get(DRAFTS, 0) - before.get(DRAFTS, 0))
        deadline = time.monotonic() + STEP_WAIT_S
        while True:
            steps = parse_steps(self.server.log_text(offset))
            if len(steps) >= want or time.monotonic() > deadline:
                return steps
            time.sleep(0.01)

    def _slot_steps(self, offset: int, drafted: int) -> list[Step]:
        """This request's steps from its slot's log lines, waiting briefly until they account for `drafted`."""
        deadline = time.monotonic() + STEP_WAIT_S
        while True:
            steps = parse_steps(self.server.log_text(offset), slot=self.slot)
            if sum(s.drafted for s in steps) >= drafted or time.monotonic() > deadline:
                return steps
            time.sleep(0.01)

    def end(self) -> None:
        """Give the slot back (several agents at once); the next task's first request starts without the cache."""
        self._turn = 0
        self._metrics = None
        if self._release is not None:
            self._release()
            self._release = None
