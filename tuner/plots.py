"""The study's plots (PNG in runs/<study>/plots/, attached to the MLflow parent run).

Optimization history, parameter importances, seconds per success against memory with the ceiling
drawn, and acceptance by draft position of the best trial. matplotlib's object API (no pyplot state).
"""

from __future__ import annotations

import math
from pathlib import Path

import optuna
from matplotlib.figure import Figure
from optuna.trial import FrozenTrial, TrialState

from common.units import GIB
from runners.plots import _empty, _figure
from tuner import constraints
from tuner.study import role


def _complete(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    return [t for t in trials if t.state == TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)]


def history(trials: list[FrozenTrial]) -> Figure:
    """Seconds per success by trial number (feasible, infeasible, baseline) and the best so far."""
    fig = _figure()
    done = _complete(trials)
    if not done:
        return _empty(fig, "no complete trial with a success yet")
    ax = fig.subplots()
    for label, pick, marker in (
        ("baseline (OFF)", lambda t: role(t) == "baseline", "s"),
        ("feasible", lambda t: role(t) == "candidate" and constraints.feasible(t), "o"),
        ("infeasible", lambda t: role(t) == "candidate" and not constraints.feasible(t), "x"),
    ):
        chosen = [t for t in done if pick(t)]
        if chosen:
            ax.scatter([t.number for t in chosen], [t.value for t in chosen], label=label, marker=marker)
    best, line = math.inf, []
    for t in sorted(done, key=lambda t: t.number):
        if role(t) == "candidate" and constraints.feasible(t):
            best = min(best, t.value)
        line.append((t.number, best if math.isfinite(best) else None))
    xs = [n for n, v in line if v is not None]
    if xs:
        ax.step(xs, [v for _, v in line if v is not None], where="post", label="best feasible so far")
    ax.set_xlabel("trial")
    ax.set_ylabel("seconds per success (lower is better)")
    ax.legend(fontsize="small")
    return fig


def importances(trials: list[FrozenTrial]) -> Figure:
    """Optuna's fANOVA parameter importances over the complete feasible candidates."""
    fig = _figure()
    done = [t for t in _complete(trials) if role(t) == "candidate"]
    if len(done) < 3:
        return _empty(fig, f"{len(done)} complete candidate(s): too few for importances")
    study = optuna.create_study()
    study.add_trials(done)
    try:
        values = optuna.importance.get_param_importances(study, params=["drafter"] if _mixed(done) else None)
    except (RuntimeError, ValueError) as exc:
        return _empty(fig, f"importances unavailable: {exc}"[:80])
    ax = fig.subplots()
    names = list(values)[::-1]
    ax.barh(names, [values[n] for n in names])
    ax.set_xlabel("importance (fANOVA)")
    return fig


def _mixed(trials: list[FrozenTrial]) -> bool:
    """More than one drafter: only `drafter` is common to every trial."""
    return len({t.params.get("drafter") for t in trials}) > 1


def memory_tradeoff(trials: list[FrozenTrial], ceiling_bytes: int) -> Figure:
    """Seconds per success against memory (estimated or measured), the VRAM ceiling as a line."""
    fig = _figure()
    done = [t for t in _complete(trials) if t.user_attrs.get("memory_bytes")]
    if not done:
        return _empty(fig, "no complete trial with a memory figure")
    ax = fig.subplots()
    for t in done:
        label = "OFF" if role(t) == "baseline" else str(t.params.get("drafter"))
        ax.scatter(t.user_attrs["memory_bytes"] / GIB, t.value, marker="s" if label == "OFF" else "o")
        ax.annotate(f"{t.number}:{label}", (t.user_attrs["memory_bytes"] / GIB, t.value), fontsize="x-small")
    ax.axvline(ceiling_bytes / GIB, color="tab:red", linestyle="--", label=f"ceiling {ceiling_bytes / GIB:g} GiB")
    ax.set_xlabel("memory (GiB)")
    ax.set_ylabel("seconds per success")
    ax.legend(fontsize="small")
    return fig


def best_acceptance(trial: FrozenTrial | None) -> Figure:
    """Acceptance rate at each draft position of the best trial."""
    fig = _figure()
    rates = list((trial.user_attrs.get("acceptance_by_position") or []) if trial else [])
    if not rates:
        return _empty(fig, "no best trial with drafted tokens")
    ax = fig.subplots()
    ax.bar(range(1, len(rates) + 1), rates)
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance")
    ax.set_ylim(0, 1)
    ax.set_title(f"trial {trial.number}: {trial.params.get('drafter')}")
    return fig


def save_study_plots(
    trials: list[FrozenTrial], best: FrozenTrial | None, ceiling_bytes: int, study_dir: Path
) -> list[Path]:
    """Write the four PNGs under study_dir/plots/; returns their paths."""
    out = study_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    figures = {
        "optimization_history.png": history(trials),
        "param_importances.png": importances(trials),
        "seconds_vs_memory.png": memory_tradeoff(trials, ceiling_bytes),
        "best_acceptance_by_position.png": best_acceptance(best),
    }
    paths = []
    for name, fig in figures.items():
        fig.savefig(out / name, dpi=110)
        paths.append(out / name)
    return paths
