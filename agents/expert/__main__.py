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
from pathlib import Path

from agents.expert.runner import TOKENIZER_VOCAB, ExpertOutcome, report, run_expert
from tasks.environment import materializer
from tasks.sandbox import SANDBOXES, make_sandbox


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
