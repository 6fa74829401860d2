"""The agent loop: one task, turn by turn, until submit or a limit; the trajectory saved every step.

The conversation is one token-id list: the opening messages rendered once, then per turn the
model's reply ids exactly as returned, the template's end-of-turn closing, and the observation's
ids rendered as a delta -- so an engine session extends its KV and never prefills history twice.
The caller starts the sandbox (the task's workspace) and closes it. Non-goals: evaluation (the
final diff is judged elsewhere, in a fresh sandbox) and retries.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.actions import Command, Edit, FormatError, Submit, parse_action
from agents.edits import apply_edit
from agents.model import AgentModel, ModelReply
from agents.prompts import (
    SYSTEM_PROMPT,
    ChatRenderer,
    command_observation,
    format_error_observation,
    instance_prompt,
)
from common.errors import ConfigError
from common.files import write_atomic
from engine.stats import GenerationStats
from tasks.sandbox.base import PatchTooLargeError, Sandbox
from tasks.schema import Instance

STATUSES = ("submitted", "step_limit", "time_limit", "context_exceeded", "format_errors", "patch_too_large", "error")


@dataclass
class AgentConfig:
    """Limits of one task and how observations are cut."""

    max_steps: int = 30  # model turns (format errors included)
    max_wall_s: float = 600.0  # seconds for the whole task, checked between steps
    max_format_errors: int = 3  # consecutive turns without exactly one action that end the task
    max_context_tokens: int | None = None  # tokens of prompt + reply; None: the model's own limit
    max_new_tokens: int = 512  # tokens one reply may have
    command_timeout_s: float = 60.0  # seconds one command (or edit) may run
    max_output_chars: int = 10_000  # observation output above this keeps its head and tail
    max_output_lines: int = 200  # observation output above this many lines keeps its head and tail

    def __post_init__(self) -> None:
        positive = ("max_steps", "max_format_errors", "max_new_tokens", "max_output_chars", "max_output_lines")
        bad = [f"{k}={getattr(self, k)!r}" for k in positive if getattr(self, k) < 1]
        bad += [f"{k}={getattr(self, k)!r}" for k in ("max_wall_s", "command_timeout_s") if not getattr(self, k) > 0]
        if self.max_context_tokens is not None and self.max_context_tokens < 1:
            bad.append(f"max_context_tokens={self.max_context_tokens!r}")
        if bad:
            raise ConfigError(f"AgentConfig: {', '.join(bad)} must be positive (max_context_tokens may be None)")


@dataclass
class AgentResult:
    """How one task went."""

    instance_id: str  # the task
    status: str  # one of STATUSES
    message: str  # why it ended (the exception text for `error`)
    patch: str  # the workspace diff at the end (also when not submitted)
    steps: int  # model turns taken
    format_errors: int  # turns without exactly one action (all, not only consecutive)
    wall_s: float  # seconds for the whole task
    model_s: float  # seconds inside model.reply
    tool_s: float  # seconds running actions and taking the final diff
    stats: GenerationStats | None  # engine counters summed over turns; None for scripted models
    prompt_tokens: int  # prompt tokens given to the model, summed over turns
    max_context_tokens: int  # longest prompt + reply reached
    generated_ids: list[int] = field(default_factory=list)  # all reply tokens, in order
    trajectory_path: str | None = None  # where the trajectory JSON is

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (stats with derived values)."""
        data = asdict(self)
        data["stats"] = self.stats.to_dict() if self.stats is not None else None
        return data


class _Ended(Exception):
    """Ends the task with a status (a limit, submission or format errors) and a message."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _context_limit(model: AgentModel, config: AgentConfig) -> int | None:
    limits = [x for x in (config.max_context_tokens, getattr(model, "context_limit", None)) if x is not None]
    return min(limits) if limits else None


class _Task:
    """The state of one task while the loop runs (see run_agent)."""

    def __init__(
        self,
        instance: Instance,
        model: AgentModel,
        sandbox: Sandbox,
        config: AgentConfig,
        renderer: ChatRenderer,
        trajectory_path: Path | None,
    ) -> None:
        self.instance, self.model, self.sandbox, self.config = instance, model, sandbox, config
        self.renderer, self.trajectory_path = renderer, trajectory_path
        self.t0 = time.perf_counter()
        self.limit = _context_limit(model, config)
        self.messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": instance_prompt(instance)},
        ]
        self.ids: list[int] = []
        self.records: list[dict[str, Any]] = []
        self.generated: list[int] = []
        self.stats: GenerationStats | None = None
        self.steps = self.format_errors = self.consecutive_errors = self.prompt_tokens = self.max_context = 0
        self.model_s = self.tool_s = 0.0
        self.status: str | None = None
        self.message = ""

    def run(self) -> AgentResult:
        """Turns until an exit status; the trajectory is saved after every step and at the end."""
        try:
            self.model.begin(self.instance.instance_id)
            self.ids = self.renderer.first(self.messages)
            self.save()
            while True:
                self.check_limits()
                self.turn()
                self.save()
        except _Ended as ended:
            self.status, self.message = ended.status, ended.message
        except Exception as exc:  # the model, template or sandbox broke: this task is lost, the run goes on
            self.status, self.message = "error", f"{type(exc).__name__}: {exc}"
        finally:
            if self.status is None:  # KeyboardInterrupt and the like: keep what happened, then propagate
                self.message = "interrupted"
                self.save()
        return self.finish()

    def check_limits(self) -> None:
        """Raise _Ended when a limit forbids another turn."""
        config = self.config
        if self.steps >= config.max_steps:
            raise _Ended("step_limit", f"reached the limit of {config.max_steps} steps")
        elapsed = time.perf_counter() - self.t0
        if elapsed >= config.max_wall_s:
            raise _Ended("time_limit", f"{elapsed:.1f} s exceeds the limit of {config.max_wall_s:g} s")
        if self.limit is not None and len(self.ids) + config.max_new_tokens > self.limit:
            raise _Ended(
                "context_exceeded",
                f"{len(self.ids)} prompt tokens + {config.max_new_tokens} new tokens exceed "
                f"the context limit of {self.limit}",
            )

    def turn(self) -> None:
        """One step: the model's reply, its action, the observation appended to the conversation."""
        t_model = time.perf_counter()
        reply = self.model.reply(list(self.ids), [dict(m) for m in self.messages], self.config.max_new_tokens)
        turn_s = time.perf_counter() - t_model
        self.model_s += turn_s
        self.steps += 1
        self.prompt_tokens += len(self.ids)
        self.max_context = max(self.max_context, len(self.ids) + len(reply.tokens))
        if reply.stats is not None:
            self.stats = reply.stats if self.stats is None else self.stats + reply.stats
        record: dict[str, Any] = {
            "step": self.steps,
            "prompt_tokens": len(self.ids),
            "reply": reply.text,
            "reply_tokens": len(reply.tokens),
            "finish_reason": reply.finish_reason,
            "stats": reply.stats.to_dict() if reply.stats is not None else None,
            "model_s": turn_s,
        }
        self.records.append(record)
        self.generated.extend(reply.tokens)
        self.ids.extend(reply.tokens)  # exactly as generated: never re-tokenized
        self.ids.extend(self.renderer.close_reply(reply.tokens))
        self.messages.append({"role": "assistant", "content": reply.text})

        t_tool = time.perf_counter()
        try:
            observation = self.act(reply, record)
        finally:
            record["tool_s"] = time.perf_counter() - t_tool
            self.tool_s += record["tool_s"]
            record["elapsed_s"] = time.perf_counter() - self.t0
        record["observation"] = observation
        message = {"role": "user", "content": observation}
        self.ids.extend(self.renderer.next_message(self.messages, message))
        self.messages.append(message)

    def act(self, reply: ModelReply, record: dict[str, Any]) -> str:
        """Run the reply's action and return the observation; raise _Ended on submit or too many format errors."""
        config = self.config
        try:
            action = parse_action(reply.text)
        except FormatError as exc:
            self.format_errors += 1
            self.consecutive_errors += 1
            record["action"] = {"kind": "format_error", "error": str(exc)}
            observation = format_error_observation(str(exc), reply.finish_reason, config.max_new_tokens)
            if self.consecutive_errors >= config.max_format_errors:
                record["observation"] = observation
                raise _Ended(
                    "format_errors", f"{self.consecutive_errors} consecutive turns without exactly one action"
                ) from None
            return observation
        self.consecutive_errors = 0
        record["action"] = action.to_dict()
        if isinstance(action, Submit):
            record["observation"] = None
            raise _Ended("submitted", "the agent submitted")
        if isinstance(action, Edit):
            edited = apply_edit(self.sandbox, action, timeout=config.command_timeout_s)
            record["edit"] = edited.details
            return edited.message
        assert isinstance(action, Command)
        result = self.sandbox.run(action.command, timeout=config.command_timeout_s)
        record["returncode"] = result.returncode
        return command_observation(result, config.max_output_chars, config.max_output_lines, config.command_timeout_s)

    def finish(self) -> AgentResult:
        """Take the final diff, release the model's task state, save and return the result."""
        patch = ""
        t_diff = time.perf_counter()
        try:
            patch = self.sandbox.diff()
        except PatchTooLargeError as exc:  # the workspace holds more than a patch can carry: no patch
            if self.status != "error":
                self.status, self.message = "patch_too_large", str(exc)
        except Exception as exc:
            if self.status != "error":
                self.status, self.message = "error", f"final diff failed: {type(exc).__name__}: {exc}"
        self.tool_s += time.perf_counter() - t_diff
        try:
            self.model.end()
        except Exception as exc:
            if self.status != "error":
                self.status, self.message = "error", f"model.end failed: {type(exc).__name__}: {exc}"
        assert self.status is not None
        result = AgentResult(
            instance_id=self.instance.instance_id,
            status=self.status,
            message=self.message,
            patch=patch,
            steps=self.steps,
            format_errors=self.format_errors,
            wall_s=time.perf_counter() - self.t0,
            model_s=self.model_s,
            tool_s=self.tool_s,
            stats=self.stats,
            prompt_tokens=self.prompt_tokens,
            max_context_tokens=self.max_context,
            generated_ids=list(self.generated),
            trajectory_path=str(self.trajectory_path) if self.trajectory_path is not None else None,
        )
        self.save(result)
        return result

    def save(self, result: AgentResult | None = None) -> None:
        """Write the trajectory so far (atomically); a no-op without a trajectory path."""
        if self.trajectory_path is None:
            return
        data = {
            "instance_id": self.instance.instance_id,
            "model": getattr(self.model, "name", type(self.model).__name__),
            "config": asdict(self.config),
            "chat_template": "fallback" if self.renderer.uses_fallback else "tokenizer",
            "status": self.status,
            "message": self.message,
            "messages": self.messages,
            "steps": self.records,
            "result": result.to_dict() if result is not None else None,
        }
        write_atomic(self.trajectory_path, json.dumps(data, indent=1, ensure_ascii=False))


def run_agent(
    instance: Instance,
    model: AgentModel,
    sandbox: Sandbox,
    tokenizer: Any,
    config: AgentConfig | None = None,
    trajectory_path: Path | None = None,
    renderer: ChatRenderer | None = None,
) -> AgentResult:
    """Solve `instance` in the started `sandbox` with `model`; the model's and tools' failures end as statuses.

    `renderer` defaults to ChatRenderer(tokenizer) (its chat template, or the ChatML fallback).
    Only KeyboardInterrupt-like exceptions propagate, after the trajectory is saved.
    """
    renderer = renderer or ChatRenderer(tokenizer)
    return _Task(instance, model, sandbox, config or AgentConfig(), renderer, trajectory_path).run()
