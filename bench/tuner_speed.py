"""`python -m bench tuner-speed`: how fast the tuner reaches an answer, before vs after, and at the articles' scale.

Measured: the same study (`python -m tuner.search` with the given overrides, each run in a fresh run root) as
whole processes on this tree and, with `--before COMMIT`, on a git worktree of that commit, alternating
(before, after, before, after, ...) so that the machine's drift hits both alike. Per study: candidate trials per
hour of search (trials over the search's seconds), the time to an answer (the whole command, confirmation and
export included) and each server's answer (winner, ON/OFF, confirmed interval); per pair the ratio, and the
medians with their spread. Nothing here is a timed test: it prints what it measured.

Projected: the default study's wall time at a stated scale (decode tokens per second, tokens a task generates,
the agent's own seconds per task), with the formula, from tuner/projection.py's arithmetic (the same the study
prints before its first candidate), with candidate trials replayed (greedy, lossless: the two sides' replies
only) and run live.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from tuner.projection import SIDES, Projection, human

REPO = Path(__file__).resolve().parents[1]
# the default study's shape (conf/tune.yaml, conf/task/swe-lite.yaml): 16 candidates on 8 search tasks x 1 repeat,
# then one confirmation on 10 held-out tasks x 3 repeats
DEFAULT_SHAPE = {"trials": 16, "tasks": 8, "repeats": 1, "confirm_tasks": 10, "confirm_repeats": 3}


@dataclass
class StudyRun:
    """One study's figures: wall time, candidate trials and search seconds, and each server's answer."""

    side: str  # before | after
    wall_s: float
    search_s: float
    trials: int
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    replayed: int = 0  # candidates measured by replay (the rest live)
    task_runs: int = 0  # task runs the candidates ran (pruned ones stop early)
    task_runs_full: int = 0  # task runs they would have run unpruned

    @property
    def trials_per_hour(self) -> float:
        """Candidate trials per hour of search."""
        return self.trials * 3600 / self.search_s if self.search_s > 0 else 0.0


def read_study(folder: Path, side: str, wall_s: float) -> StudyRun:
    """The figures of a finished study folder (summary.json, trials.jsonl)."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
        rows = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{folder}: not a finished study ({exc})") from exc
    candidates = [r for r in rows if r.get("role") == "candidate" and not r["user_attrs"].get("reused")]
    drafters = {r["number"]: r["params"].get("drafter", "?") for r in rows}
    answers = {}
    for server, w in (summary.get("winners") or {}).items():
        interval = ((w.get("confirmed") or {}).get("speedup_interval")) or {}
        answers[server] = {
            "drafter": drafters.get(w.get("trial")) if w.get("trial") is not None else None,
            "on": bool(w.get("on")),
            "confirmed": interval.get("pooled"),
            "low": interval.get("low"),
            "high": interval.get("high"),
        }
    return StudyRun(
        side=side,
        wall_s=wall_s,
        search_s=float((summary.get("timings") or {}).get("search_s") or 0.0),
        trials=len(candidates),
        answers=answers,
        replayed=sum(r["user_attrs"].get("measure") == "replay" for r in candidates),
        task_runs=sum(int(r["user_attrs"].get("tasks_run") or 0) for r in candidates),
        task_runs_full=sum(int(r["user_attrs"].get("tasks_total") or 0) for r in candidates),
    )


def run_study(tree: Path, overrides: list[str], root: Path, name: str, side: str, log: Path) -> StudyRun:
    """One `python -m tuner.search` on `tree` (its own run root), timed as a whole process."""
    command = [
        sys.executable,
        "-m",
        "tuner.search",
        *overrides,
        f"run.root={root}",
        f"study.name={name}",
        "tracking.enabled=false",
        "run.progress=false",
    ]
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"\n### {side}: {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, cwd=tree, env=_env(tree), stdout=out, stderr=subprocess.STDOUT)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"the {side} study exited {done.returncode}; its output is in {log}")
    return read_study(root / name, side, wall)


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def worktree(commit: str, into: Path) -> Path:
    """A detached git worktree of `commit` under `into` (removed by `remove_worktree`)."""
    path = into / f"before-{commit[:12]}"
    made = subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(path), commit], capture_output=True, text=True
    )
    if made.returncode != 0:
        raise ConfigError(f"--before {commit}: {made.stderr.strip() or 'git worktree add failed'}")
    return path


def remove_worktree(path: Path) -> None:
    """Remove a worktree `worktree` made."""
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], capture_output=True)


def measure(overrides: list[str], studies: int, before: str | None, log: Path) -> list[StudyRun]:
    """`studies` studies per side, alternating before and after (after alone without `before`)."""
    runs: list[StudyRun] = []
    with tempfile.TemporaryDirectory(prefix="spectune-tuner-speed.") as tmp:
        tmpdir = Path(tmp)
        old = worktree(before, tmpdir) if before else None
        try:
            for i in range(studies):
                order = [("before", old), ("after", REPO)] if old else [("after", REPO)]
                if i % 2:
                    order.reverse()  # who goes first takes turns too
                for side, tree in order:
                    assert tree is not None
                    root = tmpdir / f"runs-{side}-{i}"
                    print(f"[tuner-speed] study {i + 1}/{studies} {side} ...", file=sys.stderr, flush=True)
                    runs.append(run_study(tree, overrides, root, f"speed-{side}-{i}", side, log))
        finally:
            if old is not None:
                remove_worktree(old)
    return runs


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def compare(runs: list[StudyRun]) -> dict[str, Any]:
    """Medians with their spread per side, and the after/before ratios pair by pair."""
    out: dict[str, Any] = {}
    for side in ("before", "after"):
        mine = [r for r in runs if r.side == side]
        if mine:
            out[side] = {
                "trials_per_hour": _spread([r.trials_per_hour for r in mine]),
                "time_to_answer_s": _spread([r.wall_s for r in mine]),
                "studies": [r.__dict__ | {"trials_per_hour": r.trials_per_hour} for r in mine],
            }
    before, after = [r for r in runs if r.side == "before"], [r for r in runs if r.side == "after"]
    if before and after:
        pairs = list(zip(before, after, strict=False))
        out["ratio"] = {
            "trials_per_hour": _spread([a.trials_per_hour / b.trials_per_hour for b, a in pairs if b.trials_per_hour]),
            "time_to_answer": _spread([b.wall_s / a.wall_s for b, a in pairs if a.wall_s]),
        }
    return out


def scale_projection(tokens_per_s: float, tokens_per_task: float, agent_s: float, shape: dict[str, int]) -> dict:
    """The default study's wall time at a stated scale, replayed and live candidates, with the formula."""
    run_live = tokens_per_task / tokens_per_s + agent_s  # one side's task run: decoding plus the agent's own work
    run_replay = tokens_per_task / tokens_per_s  # a replayed side redoes the replies only
    task_runs = shape["tasks"] * shape["repeats"]
    recording = task_runs * run_live
    out = {}
    for mode, per_run in (("replay", run_replay), ("live", run_live)):
        projection = Projection(
            spent_s=recording,
            trials=shape["trials"],
            trial_s=SIDES * task_runs * per_run,
            next_trial_s=SIDES * task_runs * per_run,
            confirmations=1,
            reserved_confirmations=1,
            confirm_tasks=shape["confirm_tasks"],
            confirm_repeats=shape["confirm_repeats"],
            confirm_run_s=run_live,
            confirm_overhead_s=0.0,
            basis="the stated scale",
        )
        out[mode] = {"total_s": projection.total_s, "parts": projection.parts(), "line": projection.line(None)}
    out["formula"] = (
        f"run = {tokens_per_task:g} tokens / {tokens_per_s:g} tok/s + {agent_s:g} s agent = {human(run_live)} "
        f"(replayed side: {human(run_replay)}); total = recording {task_runs} runs + {shape['trials']} trials x "
        f"{SIDES} sides x {task_runs} runs + confirmation {shape['confirm_tasks']} x {shape['confirm_repeats']} x "
        f"{SIDES} live runs + export"
    )
    return out


def report(result: dict[str, Any], console: Any) -> None:
    """Rich tables of what `main_run` measured and projected."""
    from rich.table import Table

    measured = result.get("measured") or {}
    if measured:
        table = Table(title=f"tuner speed: {' '.join(result['overrides']) or '(the defaults of conf/tune.yaml)'}")
        for column in ("side", "study", "trials", "replayed", "task runs (of unpruned)", "search", "trials/h", "wall"):
            table.add_column(column)
        for side in ("before", "after"):
            for i, s in enumerate((measured.get(side) or {}).get("studies", [])):
                table.add_row(
                    side,
                    str(i + 1),
                    str(s["trials"]),
                    str(s["replayed"]),
                    f"{s['task_runs']} ({s['task_runs_full']})",
                    human(s["search_s"]),
                    f"{s['trials_per_hour']:.0f}",
                    human(s["wall_s"]),
                )
        console.print(table)
        for side in ("before", "after"):
            if side in measured:
                tph, wall = measured[side]["trials_per_hour"], measured[side]["time_to_answer_s"]
                console.print(
                    f"{side}: trials/h median {tph['median']:.0f} ({tph['min']:.0f}-{tph['max']:.0f}), time to an "
                    f"answer median {human(wall['median'])} ({human(wall['min'])}-{human(wall['max'])})"
                )
        if "ratio" in measured:
            tph, answer = measured["ratio"]["trials_per_hour"], measured["ratio"]["time_to_answer"]
            console.print(
                f"after/before, pair by pair: trials/h x{tph['median']:.2f} ({tph['min']:.2f}-{tph['max']:.2f}), "
                f"time to an answer x{answer['median']:.2f} ({answer['min']:.2f}-{answer['max']:.2f})"
            )
        for side in ("before", "after"):
            for i, s in enumerate((measured.get(side) or {}).get("studies", [])):
                answers = "; ".join(
                    f"{server} {a['drafter'] or '-'} {'ON' if a['on'] else 'OFF'}"
                    + (f" {a['confirmed']:.2f}x [{a['low']:.2f}, {a['high']:.2f}]" if a["confirmed"] else "")
                    for server, a in s["answers"].items()
                )
                console.print(f"  {side} study {i + 1}: {answers}")
    scale = result["scale"]
    console.print(f"[bold]the default study at a stated scale[/]: {scale['formula']}")
    for mode in ("replay", "live"):
        console.print(f"  candidates {mode}: {scale[mode]['line']}")


def main_run(args: Any, console: Any) -> dict[str, Any]:
    """`python -m bench tuner-speed`: measure (unless --project-only) and project; returns the result."""
    if args.tokens_per_s <= 0 or args.tokens_per_task <= 0 or args.agent_s < 0:
        raise ConfigError("--tokens-per-s and --tokens-per-task must be positive, --agent-s not negative")
    result: dict[str, Any] = {
        "overrides": list(args.overrides),
        "scale": scale_projection(args.tokens_per_s, args.tokens_per_task, args.agent_s, DEFAULT_SHAPE),
    }
    if not args.project_only:
        log = Path(args.log)
        log.parent.mkdir(parents=True, exist_ok=True)
        runs = measure(list(args.overrides), args.studies, args.before, log)
        result["measured"] = compare(runs)
        result["before"] = args.before
        result["log"] = str(log)
    return result
