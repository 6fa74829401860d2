"""Where a suite's tasks live: how to build a task's workspace, which sandbox runs it, how to grade it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from tasks.evaluation import EvaluationResult, evaluate
from tasks.sandbox import Sandbox, make_sandbox
from tasks.schema import Instance


@dataclass
class TaskEnvironment:
    """Workspaces, sandboxes and evaluation for one suite."""

    suite: str
    sandbox: str = "local"  # local | docker
    sandbox_options: dict[str, Any] = field(default_factory=dict)
    materialize: Callable[[Instance, Path], Path] | None = None  # builds a task's starting workspace
    evaluation_timeout_s: float = 300.0
    sandbox_factory: Callable[[], Sandbox] | None = None  # overrides `sandbox` + `sandbox_options` (tests, tools)

    def new_sandbox(self) -> Sandbox:
        """A fresh, not yet started sandbox."""
        if self.sandbox_factory is not None:
            return self.sandbox_factory()
        return make_sandbox(self.sandbox, **self.sandbox_options)

    def workspace(self, instance: Instance, dest: Path) -> Path:
        """The task's starting workspace in `dest` (the agent's copy; evaluation builds its own)."""
        assert self.materialize is not None
        return self.materialize(instance, dest)

    def evaluate(self, instance: Instance, patch: str) -> EvaluationResult:
        """Grade a final diff in a fresh sandbox, never in the agent's workspace."""
        assert self.materialize is not None
        return evaluate(instance, patch, self.materialize, self.new_sandbox, timeout=self.evaluation_timeout_s)


def materializer(suite: str) -> Callable[[Instance, Path], Path]:
    """The function that builds a task's starting workspace for `suite` (swe-lite only, for now)."""
    if suite == "swe-lite":
        from tasks.swelite.projects import materialize

        return materialize
    if suite == "swe-bench-lite":
        raise ConfigError(
            "task=swe-bench-lite: agent runs need each instance's repository at its base commit inside the "
            "SWE-bench per-instance docker image; agent workspaces there are not wired yet (loading and "
            "evaluation are: tasks/suites.py, tasks/swebench_eval.py). Use task=swe-lite for agent runs."
        )
    raise ConfigError(f"unknown suite {suite!r}; choose one of: swe-lite, swe-bench-lite")


def make_environment(
    suite: str, sandbox: str = "local", sandbox_options: dict[str, Any] | None = None
) -> TaskEnvironment:
    """The environment of a suite; bad sandbox options and a missing docker daemon fail here, before models load."""
    options = dict(sandbox_options or {})
    materialize = materializer(suite)
    make_sandbox(sandbox, **options).close()
    return TaskEnvironment(suite, sandbox, options, materialize)
