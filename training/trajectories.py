"""Expert trajectories of every swe-lite instance, generated once and cached in the work folder.

Each split has a folder of trajectory JSONs (the agent loop's own format) and a `results.jsonl`
with one row per finished instance (the expert CLI's format), appended as instances finish, so an
interrupted run resumes where it stopped. Only resolved trajectories become training data.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.expert.runner import TOKENIZER_VOCAB, run_expert
from agents.loop import AgentConfig
from tasks.environment import materializer
from tasks.sandbox import make_sandbox
from tasks.suites import load_suite

SPLITS = ("train", "dev", "test")
# The runner's observation limits (agents.loop.AgentConfig, the `agent` node); a generous reply budget so no
# expert reply is cut short by the throwaway tokenizer used here (replies are text; ids come later).
AGENT_CONFIG = AgentConfig(max_steps=30, max_new_tokens=8192, max_output_chars=10_000, max_output_lines=200)


def split_dir(work: Path, split: str) -> Path:
    """Folder of one split's cached trajectories."""
    return work / "trajectories" / split


def finished(work: Path, split: str) -> dict[str, dict[str, Any]]:
    """Result rows of the instances of `split` already run, by instance id."""
    path = split_dir(work, split) / "results.jsonl"
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {row["instance_id"]: row for row in rows}


def generate(
    work: Path,
    splits: tuple[str, ...] = SPLITS,
    limit: int | None = None,
    log: Callable[[str], None] = print,
) -> None:
    """Run the scripted expert (local sandbox, real agent loop and evaluation) on every instance not yet cached."""
    from engine.tiny import train_tokenizer

    tokenizer = train_tokenizer(TOKENIZER_VOCAB)  # any tokenizer serves: the expert's replies are plain text
    for split in splits:
        folder = split_dir(work, split)
        done = finished(work, split)
        todo = [i for i in load_suite("swe-lite", split=split, limit=limit) if i.instance_id not in done]
        log(f"trajectories {split}: {len(done)} cached, {len(todo)} to run")
        runs = run_expert(
            todo,
            tokenizer,
            materializer("swe-lite"),
            lambda: make_sandbox("local"),
            config=AGENT_CONFIG,
            trajectory_dir=folder,
        )
        for n, outcome in enumerate(runs, 1):
            with (folder / "results.jsonl").open("a") as fh:
                fh.write(json.dumps(outcome.row()) + "\n")
            if n % 25 == 0 or n == len(todo):
                log(f"trajectories {split}: {n}/{len(todo)}")


def load(work: Path, splits: tuple[str, ...] = SPLITS) -> list[dict[str, Any]]:
    """The resolved trajectories of `splits`, each the loop's JSON plus its `split`, in a fixed order."""
    out = []
    for split in splits:
        for iid, row in sorted(finished(work, split).items()):
            if not row["resolved"]:
                continue
            data = json.loads((split_dir(work, split) / f"{iid}.json").read_text(encoding="utf-8"))
            data["split"] = split
            out.append(data)
    return out
