"""EngineModel: the AgentModel that generates with the speculative engine, one session per task.

Each turn's prompt extends the previous turn's ids, so the session reuses the KV of the whole
history and prefills only what is new (the observation and the next header). The session's seed
is the given `seed`, or else derived from the engine's seed and the instance id, so a sampled task
replays the same way whatever ran before it. With a `Scheduler` (several agents at once) each turn is
decoded in one batch with the other agents' turns (engine/scheduler.py).
"""

from __future__ import annotations

import time
import zlib
from typing import Any

from agents.model import ModelReply
from engine.engine import Engine
from engine.scheduler import Scheduler
from engine.session import Session


class EngineModel:
    """Generates each turn in one engine session per task."""

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        name: str,
        *,
        seed: int | None = None,
        stop_tokens: frozenset[int] | None = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.engine = engine
        self.scheduler = scheduler  # set: turns are batched with other agents' (several agents at once)
        self.tokenizer = tokenizer
        self.name = name
        self.seed = seed  # sampling seed of every task's session; None: engine seed + crc32(instance id)
        self.stop_tokens = frozenset(stop_tokens) if stop_tokens is not None else engine.stop_tokens
        self.session: Session | None = None

    @property
    def context_limit(self) -> int:
        """The target model's context window in tokens."""
        return self.engine.context_limit

    @property
    def lossy(self) -> bool:
        """True when the engine's acceptance rule may change the output (approximate acceptance)."""
        return self.engine.lossy

    def begin(self, instance_id: str) -> None:
        """A fresh session (empty KV) for a new task."""
        seed = self.seed
        if seed is None:
            seed = (self.engine.config.seed + zlib.crc32(instance_id.encode("utf-8"))) % 2**31
        self.session = self.engine.new_session(seed=seed)

    def reply(self, prompt_ids: list[int], messages: list[dict[str, str]], max_new_tokens: int) -> ModelReply:
        """Generate in the task's session; only `prompt_ids` is used."""
        if self.session is None:
            raise RuntimeError("EngineModel.reply called outside a task: call begin(instance_id) first")
        t0 = time.perf_counter()
        if self.scheduler is not None:
            result = self.scheduler.generate(prompt_ids, max_new_tokens, self.session, self.stop_tokens)
        else:
            stop = self.stop_tokens
            result = self.engine.generate(prompt_ids, max_new_tokens, session=self.session, stop_tokens=stop)
        wall = time.perf_counter() - t0
        body = result.tokens[:-1] if result.finish_reason == "eos" else result.tokens
        text = self.tokenizer.decode(body, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return ModelReply(
            tokens=list(result.tokens), text=text, finish_reason=result.finish_reason, stats=result.stats, wall_s=wall
        )

    def end(self) -> None:
        """Drop the session and its KV cache."""
        self.session = None
