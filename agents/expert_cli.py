"""Run the scripted expert over a suite through the real agent loop, sandbox and evaluation.

    python -m agents.expert swe-lite --split dev [--limit N] [--sandbox local|docker] [--out DIR]

Each instance: a fresh workspace, `run_agent` with an `ExpertModel`, then `tasks.evaluation.evaluate`
of the final diff in a new sandbox. Prints the resolve rate per mutation family (and per project)
and lists what was not resolved; with `--out`, writes each trajectory and a results JSONL there.
A check of the expert (and a source of its trajectories), not a measurement of any model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.episode import run_episode
from agents.expert import ExpertModel
from agents.loop import AgentConfig, AgentResult
from tasks.environment import TaskEnvironment, materializer
from tasks.evaluation import EvaluationResult
from tasks.sandbox import SANDBOXES, Sandbox, make_sandbox
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


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m agents.expert", description=__doc__.splitlines()[0])
    parser.add_argument("suite", choices=["swe-lite"], help="task suite")
    parser.add_argument("--split", default="dev", help="suite split (default: dev)")
    parser.add_argument("--limit", type=int, default=None, help="first N instances only")
    parser.add_argument("--instance-ids", nargs="+", default=None, help="only these instances")
    parser.add_argument("--sandbox", choices=sorted(SANDBOXES), default="local", help="where commands run")
    parser.add_argument("--tokenizer", default=None, help="HF tokenizer folder (default: the tiny trained one)")
    parser.add_argument("--out", type=Path, default=None, help="folder for trajectories and results.jsonl")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the expert over a split and print its resolve rates; exit 1 if any instance is unresolved."""
    args = build_parser().parse_args(argv)
    from tasks.suites import load_suite

    instances = load_suite(args.suite, split=args.split, limit=args.limit, instance_ids=args.instance_ids)
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        from engine.tiny import train_tokenizer

        tokenizer = train_tokenizer(TOKENIZER_VOCAB)
    trajectories = args.out / "trajectories" if args.out else None
    results = args.out / "results.jsonl" if args.out else None
    if results is not None:
        results.parent.mkdir(parents=True, exist_ok=True)
        results.write_text("")
    t0 = time.perf_counter()
    outcomes: list[ExpertOutcome] = []
    runs = run_expert(
        instances, tokenizer, materializer(args.suite), lambda: make_sandbox(args.sandbox), trajectory_dir=trajectories
    )
    for i, outcome in enumerate(runs, 1):
        outcomes.append(outcome)
        mark = "ok " if outcome.resolved else "FAIL"
        print(f"[{i}/{len(instances)}] {mark} {outcome.instance.instance_id} ({outcome.agent.steps} steps)", flush=True)
        if results is not None:
            row = {**outcome.row(), "evaluation": outcome.evaluation.to_dict()}
            with results.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
    if not outcomes:
        print("no instances selected", file=sys.stderr)
        return 2
    report(outcomes, f"{args.suite}/{args.split} ({args.sandbox} sandbox, {time.perf_counter() - t0:.0f} s)")
    return 0 if all(o.resolved for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
