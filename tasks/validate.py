"""Check a suite: every hidden test splits into probe and checks, the gold patch resolves every instance, the empty
patch resolves none (it must end `unresolved`, never a grading error).

    python -m tasks.validate swe-lite --split test [--sandbox local|docker] [--limit N]

Prints a summary (the tests that cannot be graded as probes, statuses, seconds per evaluation, how many instances a
patch that only answers the issue's examples resolves: tasks/swelite/snippet_attack.py) and exits non-zero
on any mismatch. The full run is a documented command, not part of the default test run (it evaluates every
instance twice).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Callable

from rich.console import Console
from rich.progress import track
from rich.table import Table

from tasks.evaluation import EvaluationResult, evaluate
from tasks.sandbox import make_sandbox
from tasks.schema import Instance
from tasks.suites import load_suite
from tasks.swelite.projects import materialize


def validate_instances(
    instances: list[Instance], sandbox: str = "local", progress: bool = True
) -> list[tuple[Instance, EvaluationResult, EvaluationResult]]:
    """(instance, gold result, empty-patch result) for each instance."""
    factory: Callable = lambda: make_sandbox(sandbox)  # noqa: E731
    rows = []
    items = track(instances, description="validating") if progress else instances
    for inst in items:
        gold = evaluate(inst, inst.patch, materialize, factory)
        empty = evaluate(inst, "", materialize, factory)
        rows.append((inst, gold, empty))
    return rows


def mismatches(rows: list[tuple[Instance, EvaluationResult, EvaluationResult]]) -> list[str]:
    """Human-readable problems: gold not resolving, or the empty patch resolving."""
    out = []
    for inst, gold, empty in rows:
        if not gold.resolved:
            out.append(f"{inst.instance_id}: gold patch not resolved ({gold.status}: {gold.message})")
        if empty.resolved:
            out.append(f"{inst.instance_id}: empty patch resolves it (the task is trivial)")
        if empty.status != "unresolved":  # the unchanged project must fail its tests, not break the grading
            out.append(f"{inst.instance_id}: empty patch ended {empty.status} ({empty.message})")
    return out


def unprobeable(instances: list[Instance]) -> tuple[int, list[str]]:
    """(listed tests in all, the problems of those the oracle cannot split: file, line and rule)."""
    import tempfile
    from pathlib import Path

    from tasks.evaluation import build_oracle, hidden_tests
    from tasks.grading.oracle import Unprobeable

    total, problems = 0, []
    with tempfile.TemporaryDirectory(prefix="spectune-validate-") as tmp:
        for n, inst in enumerate(instances):
            ids = [*inst.fail_to_pass, *inst.pass_to_pass]
            total += len(ids)
            ref = materialize(inst, Path(tmp) / str(n))
            try:
                hidden_tests(inst, ref)
                build_oracle(ref, ids)
            except Unprobeable as exc:
                problems.append(f"{inst.instance_id}: {exc}")
    return total, problems


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    p = argparse.ArgumentParser(prog="python -m tasks.validate", description=__doc__.split("\n\n")[0])
    p.add_argument("suite", choices=["swe-lite"])
    p.add_argument("--split", default="test")
    p.add_argument("--sandbox", default="local", help="local | docker")
    p.add_argument("--limit", type=int)
    p.add_argument("--no-snippet", action="store_true", help="skip grading the snippet-only patch of each instance")
    args = p.parse_args(argv)
    instances = load_suite(args.suite, args.split, limit=args.limit)
    console = Console()
    total, refused = unprobeable(instances)
    console.print(f"hidden tests graded as probes: {total - len(refused)} of {total} ({len(refused)} cannot be)")
    rows = validate_instances(instances, args.sandbox)
    problems = mismatches(rows) + refused
    gaps = []  # the suite's own weaknesses, not an instance's: they fail the run without naming one
    if not args.no_snippet:  # a lookup table of the examples, buggy elsewhere: must never resolve
        from tasks.swelite.snippet_attack import snippet_only_share

        factory: Callable = lambda: make_sandbox(args.sandbox)  # noqa: E731
        passed, total = snippet_only_share(instances, lambda inst, patch: evaluate(inst, patch, materialize, factory))
        console.print(f"snippet-only patches resolved: {passed} of {total} (target 0)")
        if passed:
            gaps.append(f"{passed} instance(s) resolved by a patch that only answers the issue's examples")
    table = Table(title=f"{args.suite}/{args.split} in the {args.sandbox} sandbox")
    for col in ("family", "instances", "gold resolved", "empty resolved"):
        table.add_column(col)
    fams = Counter(i.family for i, _, _ in rows)
    for fam in sorted(fams):
        sub = [r for r in rows if r[0].family == fam]
        table.add_row(
            fam, str(len(sub)), str(sum(g.resolved for _, g, _ in sub)), str(sum(e.resolved for _, _, e in sub))
        )
    console.print(table)
    times = [g.duration_s for _, g, _ in rows]
    if times:
        console.print(f"one evaluation: median {statistics.median(times):.2f}s, max {max(times):.2f}s")
    statuses = Counter(f"gold {g.status}" for _, g, _ in rows) + Counter(f"empty {e.status}" for _, _, e in rows)
    console.print(f"statuses: {dict(sorted(statuses.items()))}")
    diffs = Counter(i.difficulty for i, _, _ in rows)
    console.print(f"difficulty: {dict(diffs)}")
    for line in problems + gaps:
        print(line, file=sys.stderr)
    print(f"{len(rows) - len({p.split(':')[0] for p in problems})} of {len(rows)} instances valid", file=sys.stderr)
    return 1 if problems or gaps else 0


if __name__ == "__main__":
    raise SystemExit(main())
