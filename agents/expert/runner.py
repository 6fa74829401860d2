"""Run the scripted expert over instances through the real agent loop, sandbox and evaluation.

Each instance: a fresh workspace, `run_agent` with an `ExpertModel`, then `tasks.evaluation.evaluate`
of the final diff in a new sandbox (`run_expert`, one `ExpertOutcome` each); `report` prints the
resolve rate per mutation family (and per project) and lists what was not resolved. The command line
is agents/expert/__main__.py. A check of the expert (and a source of its trajectories), not a
measurement of any model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.episode import run_episode
from agents.expert.model import ExpertModel
from agents.loop import AgentConfig, AgentResult
from tasks.environment import TaskEnvironment
from tasks.evaluation import EvaluationResult
from tasks.sandbox import Sandbox
from tasks.schema import Instance

TOKENIZER_VOCAB = 512  # the tiny tokenizer used when none is given: replies only need consistent ids


@dataclass
class ExpertOutcome:
    """One instance run by the expert and judged."""

    instance: Instance  # the task
    agent: AgentResult  # how the agent loop ended (status, patch, steps)
    evaluation: EvaluationResult  # the verdict on the final diff, from a fresh sandbox

    @property
    def resolved(self) -> bool:
        """Submitted and every deciding test passed."""
        return self.agent.status == "submitted" and self.evaluation.resolved

    def row(self) -> dict[str, Any]:
        """The outcome as one results.jsonl row (without the evaluation's details)."""
        return {
            "instance_id": self.instance.instance_id,
            "family": self.instance.family,
            "resolved": self.resolved,
            "agent_status": self.agent.status,
            "steps": self.agent.steps,
        }


def run_expert(
    instances: Iterable[Instance],
    tokenizer: Any,
    materialize: Callable[[Instance, Path], Path],
    sandbox_factory: Callable[[], Sandbox],
    config: AgentConfig | None = None,
    trajectory_dir: Path | None = None,
    make_model: Callable[[Instance, Any], ExpertModel] = ExpertModel,
) -> Iterator[ExpertOutcome]:
    """Run the expert on each instance through `run_agent`, then evaluate its diff; yields as it goes.

    `make_model(instance, tokenizer)` builds each instance's expert (a subclass may record what it sees).
    """
    environment = TaskEnvironment("expert", materialize=materialize, sandbox_factory=sandbox_factory)
    for instance in instances:
        model = make_model(instance, tokenizer)
        trajectory = trajectory_dir / f"{instance.instance_id}.json" if trajectory_dir is not None else None
        episode = run_episode(instance, model, environment, tokenizer, config, trajectory, grade_unsubmitted=True)
        assert episode.evaluation is not None
        yield ExpertOutcome(instance, episode.agent, episode.evaluation)


def _rate(done: list[bool]) -> str:
    return f"{sum(done)}/{len(done)} ({100.0 * sum(done) / len(done):.1f}%)"


def report(outcomes: list[ExpertOutcome], title: str) -> None:
    """Print resolve rates per family and per project, and every unresolved instance."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(title)
    for key in ("family", "repo"):
        groups: dict[str, list[bool]] = defaultdict(list)
        for o in outcomes:
            groups[getattr(o.instance, key) or "-"].append(o.resolved)
        table = Table(title=f"resolved per {'project' if key == 'repo' else key}")
        table.add_column(key if key == "family" else "project")
        table.add_column("resolved", justify="right")
        for name in sorted(groups):
            table.add_row(name, _rate(groups[name]))
        table.add_row("all", _rate([o.resolved for o in outcomes]), style="bold")
        console.print(table)
    for o in outcomes:
        if not o.resolved:
            console.print(
                f"[red]unresolved[/red] {o.instance.instance_id}: agent {o.agent.status} ({o.agent.message}); "
                f"evaluation {o.evaluation.status} {o.evaluation.message}"
            )
