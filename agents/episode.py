"""One episode: materialise a task's workspace, run the agent in a fresh sandbox, grade its final diff.

The one place that does this; the runner (`runners.compare`), the scripted expert, training data
and the benchmarks' agent prompts all call `run_episode`. Grading always happens in a new sandbox
from the final diff (tasks/evaluation.py), never in the agent's workspace.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.loop import AgentConfig, AgentResult, run_agent
from agents.model import AgentModel
from tasks.environment import TaskEnvironment
from tasks.evaluation import EvaluationResult
from tasks.sandbox.owner import owned_tempdir
from tasks.schema import Instance


@dataclass
class Episode:
    """How the agent loop ended and, when graded, the verdict on its final diff."""

    agent: AgentResult
    evaluation: EvaluationResult | None  # None: not submitted and not asked to grade anyway

    @property
    def resolved(self) -> bool:
        """Submitted and every deciding test passed."""
        return self.agent.status == "submitted" and self.evaluation is not None and self.evaluation.resolved


def run_episode(
    instance: Instance,
    model: AgentModel,
    environment: TaskEnvironment,
    tokenizer: Any,
    config: AgentConfig | None = None,
    trajectory_path: Path | None = None,
    *,
    grade_unsubmitted: bool = False,
) -> Episode:
    """Run `model` on `instance` in a fresh sandbox of `environment`, then grade (only a submitted diff by default)."""
    with owned_tempdir("task-") as tmp:
        workspace = environment.workspace(instance, Path(tmp) / "workspace")
        sandbox = environment.new_sandbox()
        try:
            sandbox.start(workspace)
            result = run_agent(instance, model, sandbox, tokenizer, config, trajectory_path)
        finally:
            sandbox.close()
    # an unfinished task is not a completed one: grading it would only cost a test run
    graded = result.status == "submitted" or grade_unsubmitted
    return Episode(result, environment.evaluate(instance, result.patch) if graded else None)
