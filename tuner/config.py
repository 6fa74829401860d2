"""The tuner's schema: the runner's `Config` plus the search space, the study and the tuner's budgets.

`python -m tuner.search` composes conf/tune.yaml against `TuneConfig`, so every runner override
(`model=`, `hardware=`, `task.*`, `agent.*`, `sandbox=`, `tracking=`) is checked exactly as in
`python -m runners.run`, and the tuner's own keys the same way, before any model is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from runners.config import Config, register_configs


@dataclass
class SpaceConf:
    """What the tuner may try: drafters and their knobs (conf/space/*.yaml, read by tuner.space)."""

    name: str = "default"  # label recorded with the study
    allow_lossy: bool = False  # true: also try the lossy acceptance rules listed under `acceptance`
    drafters: dict[str, Any] = field(default_factory=dict)  # drafter -> {knob: [choices] | {low, high} | value}
    acceptance: dict[str, Any] = field(default_factory=dict)  # lossy rule -> {option: range}; used only if allow_lossy


@dataclass
class StudyConf:
    """The Optuna study: where it is stored, how it samples and prunes."""

    name: str = MISSING  # runs/<name>/ holds the storage and every output; the same name resumes
    storage: str | None = None  # null | sqlite: runs/<name>/study.db; journal: runs/<name>/journal.log; or an RDB URL
    seed: int = 0  # sampler seed and the per-study task order
    sampler: str = "tpe"  # tpe | gp | random (python -m bench tuner compares them on measured grids)
    startup_trials: int = 4  # random trials before TPE / GP model the space
    pruner: str = "wilcoxon"  # wilcoxon | halving | none
    prune_p: float = 0.1  # WilcoxonPruner p_threshold
    prune_startup_steps: int = 2  # tasks a trial runs before it may be pruned (halving: its first rung)
    prune_reduction: int = 3  # halving: a trial goes past a rung only among the best 1/prune_reduction
    heartbeat_interval: int = 30  # seconds; a trial silent for longer (killed process) is failed and retried
    max_retry: int = 2  # how often a trial killed mid-run is retried


@dataclass
class TunerConf:
    """Budgets, the quality constraint and the held-out confirmation."""

    trials: int = 16  # candidate trials (the OFF baseline comes on top)
    timeout_s: float | None = None  # stop starting new trials after this many seconds (null = no limit)
    # wall time of the whole run, confirmation and export included: 2h, 90m, 1h30m, 45s or seconds (null = no limit)
    budget: str | None = None
    max_regressions: int = 0  # tasks solved OFF but not ON a feasible configuration may have
    confirm: bool = True  # run the best configuration against OFF on the held-out split
    confirm_split: str = "test"  # held-out split for the confirmation
    confirm_limit: int | None = 10  # tasks of the confirmation (a `spread` subset); null = the whole split
    confirm_repeats: int = 3  # repeats of the confirmation (>= 3 for a spread)
    bootstrap_resamples: int = 2000  # resamples of the confirmation's and each trial's interval over tasks
    measure: str = "auto"  # auto: replay recorded turns where exact and greedy, else live | replay | live
    clock: str = "auto"  # auto (cpu: 1-thread CPU run of the engine; else wall) | wall | cpu: generation timing
    revisit: str = "skip"  # a parameter set measured before: skip (reuse its value) | repeat (pool more repeats)
    # null: every server | a server name or list (llama-server, vllm, sglang, tensorrt-llm): only what they run
    serve: Any = None
    min_speedup: float = 1.0  # export speculation ON only when the confirmed interval's lower end exceeds this
    # Agents at once to tune for: one study per level, each measured (and confirmed) paired with OFF at that level.
    # [1] by default: the main command's time budget covers one level; [1, 4] adds the load test's level.
    concurrency: list[int] = field(default_factory=lambda: [1])
    # llama-server only: other GGUF files of the same model a trial may run ON with (model.target is the reference
    # OFF runs on) and KV cache types besides server.cache_type_k/v; a trial that changes either is measured live
    targets: list[str] = field(default_factory=list)
    cache_types: list[str] = field(default_factory=list)


@dataclass
class TuneConfig(Config):
    """The whole configuration of `python -m tuner.search`."""

    space: SpaceConf = field(default_factory=SpaceConf)
    study: StudyConf = field(default_factory=StudyConf)
    tuner: TunerConf = field(default_factory=TunerConf)


def register_tune_configs() -> None:
    """Register the runner's schema and the tuner's (conf/tune.yaml names `tune_schema`)."""
    register_configs()
    ConfigStore.instance().store(name="tune_schema", node=TuneConfig)
