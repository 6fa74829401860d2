"""`bench concurrency`: the crossover read from the rows, the tables, and a small real run on the engine."""

from __future__ import annotations

from bench.concurrency import ConcurrencySetup, crossover, describe_crossover, render, run_concurrency_bench


def _row(method: str, agents: int, ratio: float | None) -> dict:
    return {"backend": "builtin", "agents": agents, "method": method, "on_vs_off": ratio}


def test_the_crossover_is_the_first_level_below_one():
    rows = [_row("a", 1, 1.3), _row("a", 4, 0.9), _row("b", 1, 1.1), _row("b", 4, 1.05), _row("c", 1, 0.8)]
    cross = crossover(rows, (1, 4))
    assert cross["builtin/a"]["first_level_below_1"] == 4
    assert cross["builtin/b"]["first_level_below_1"] is None
    assert cross["builtin/c"]["first_level_below_1"] == 1
    assert "up to 1 agent(s), slower than OFF from 4" in describe_crossover(cross["builtin/a"])
    assert "every level" in describe_crossover(cross["builtin/b"])


def test_a_small_run_measures_both_levels_off_and_on(tmp_path, capsys):
    setup = ConcurrencySetup(
        levels=(1, 2), methods=("ngram",), backends=("builtin",), split="dev", limit=2, repeats=1, out=str(tmp_path)
    )
    report = run_concurrency_bench(setup, progress=False)
    rows = {(r["agents"], r["method"]): r for r in report["rows"]}
    assert set(rows) == {(1, "ngram"), (2, "ngram")}
    for row in rows.values():
        assert row["unsupported"] is None and len(row["on_vs_off_repeats"]) == 1
        assert row["off_correct_per_min"][0] > 0 and row["on_correct_per_min"][0] > 0  # the bundled model solves
        assert row["diverged"] == 0 and row["regressions"] == 0 and row["acceptance_rate"] > 0
    render(report)
    out = capsys.readouterr().out
    assert "builtin: correct tasks per minute" in out and "crossover:" in out
