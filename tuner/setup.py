"""The tuner's setup: the one place that reads the composed config (conf/tune.yaml) and loads what a study needs.

`check(cfg)` validates every value without loading anything (bad input fails here, naming the allowed values);
`prepare(cfg)` also loads the tasks, the task environment and the models once, and returns a frozen
`TuneSetup` that the study, the objective and the finish take: nothing below it reads a raw `DictConfig`.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from common.digest import content_digest
from common.errors import ConfigError
from engine.engine import EngineConfig
from export import llama_server as llama_exporter
from export.fit import server_names
from runners.backends import ServerSettings, backend_class
from runners.backends.kept import KeptBackends
from runners.config import available_heads, check_config
from runners.models import load_for
from runners.workload import Workload
from serving.llama_binary import LlamaServerMissing, find_llama_server
from serving.llama_capabilities import Capabilities, probe
from tasks.environment import make_environment
from tasks.schema import Instance
from tasks.suites import load_suite
from tuner import constraints, server_choice
from tuner.projection import parse_budget
from tuner.space import Space, load_space
from tuner.storage import describe_storage
from tuner.study import PRUNERS, SAMPLERS

MEASURES = ("auto", "replay", "live")
CLOCKS = ("wall", "cpu")  # what a trial's generation time can be read on (tuner.clock also takes "auto")
REVISITS = ("skip", "repeat")
TUNER_KEYS = ("space", "study", "tuner")  # the tuner's nodes; the rest is the runner's config


@dataclass(frozen=True)
class StudySettings:
    """The Optuna study: name, storage, sampler and pruner (conf/study/)."""

    name: str
    storage: str | None
    seed: int
    sampler: str
    startup_trials: int
    pruner: str
    prune_p: float
    prune_startup_steps: int
    prune_reduction: int
    heartbeat_interval: int
    max_retry: int


@dataclass(frozen=True)
class TunerSettings:
    """Budgets, how trials measure, the quality constraint, the confirmation and the export rule."""

    trials: int
    timeout_s: float | None
    max_regressions: int
    confirm: bool
    confirm_split: str
    confirm_limit: int | None
    confirm_repeats: int
    bootstrap_resamples: int
    measure: str
    clock: str
    revisit: str
    serve: tuple[str, ...]  # server names the search is restricted to (empty: every server)
    min_speedup: float
    levels: tuple[int, ...] = (1,)  # tuner.concurrency: the levels the run tunes for, one study each
    concurrency: int = 1  # the level this setup's study measures (at_level)
    budget_s: float | None = None  # tuner.budget in seconds (None: no limit; tuner/projection.py)


@dataclass(frozen=True)
class TrackingSettings:
    """MLflow: on or off, where, which experiment."""

    enabled: bool
    uri: str | None
    experiment: str


@dataclass(frozen=True)
class TuneSetup:
    """Everything a study needs, checked and loaded once."""

    study: StudySettings
    tuner: TunerSettings
    tracking: TrackingSettings
    study_dir: Path
    space: Space
    base: EngineConfig  # the shared sampling and seed every candidate starts from (speculation OFF)
    workload: Workload  # the search tasks (shuffled with the study seed) and the loaded models
    held_out: list[Instance]  # the confirmation's tasks
    memory: constraints.MemoryFacts | constraints.ServedMemoryFacts  # served: the GGUF files' own model
    server: ServerSettings | None  # engine.backend=llama-server
    names: dict[str, str]  # hardware, model, task, split, backend (labels for reports and exports)
    model_paths: dict[str, str | None]  # target, draft, mtp, eagle3 as configured
    fingerprint: dict[str, Any]  # what a resumed study must share with the one it resumes
    composed: dict[str, Any] = field(repr=False)  # the resolved config, for the export's spectune.yaml and MLflow
    progress: bool = True
    # llama-server: the target files and KV types a trial may choose (tuner.targets, tuner.cache_types)
    choices: server_choice.Choices = field(default_factory=lambda: server_choice.Choices(("",), ("f16",)))

    def close(self) -> None:
        """Stop the backends kept across trials (OFF's llama-server); nothing else here holds a process."""
        if self.workload.kept is not None:
            self.workload.kept.close()

    @property
    def storage_description(self) -> str:
        """The storage for logs (the password of a URL masked)."""
        return describe_storage(self.study.storage, self.study_dir)

    def runner_config(self, engine: EngineConfig, choice: server_choice.ServerChoice | None = None) -> dict[str, Any]:
        """The composed `runners.run` config that reproduces the confirmation with `engine` (and the trial's own
        file and KV type, against OFF on the reference's, when it chose others)."""
        data = {k: v for k, v in _copy(self.composed).items() if k not in TUNER_KEYS}
        data["engine"] = asdict(engine)
        if server_choice.changes_numbers(choice, self.choices):
            assert choice is not None
            reference = self.choices.reference
            data["model"]["target"] = choice.target
            data["server"].update(
                cache_type_k=choice.cache_type,
                cache_type_v=choice.cache_type,
                reference_gguf=reference.target,
                reference_cache_type_k=reference.cache_type,
                reference_cache_type_v=reference.cache_type,
            )
        t = self.tuner
        data["task"].update(split=t.confirm_split, limit=t.confirm_limit, subset="spread")
        # a rerun starts a run of its own (the runner reads both keys: dropping them made the rerun crash)
        data["run"].update(
            name=f"{self.study.name}-confirmed", repeats=t.confirm_repeats, resume=False, overwrite=False
        )
        return data


def _copy(data: Any) -> Any:
    return OmegaConf.to_container(OmegaConf.create(data), resolve=True)


def _choice(value: Any, allowed: tuple[str, ...], key: str) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of: {', '.join(allowed)}")


def concurrency_levels(value: Any) -> tuple[int, ...]:
    """`tuner.concurrency` as sorted distinct levels; ValueError unless every item is a whole number >= 1."""
    items = [value] if isinstance(value, int) else list(value or [])
    if not items or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in items):
        raise ConfigError(f"tuner.concurrency={value!r}: a list of agents-at-once levels, each >= 1 (e.g. [1, 4])")
    return tuple(sorted(set(items)))


def at_level(setup: TuneSetup, level: int) -> TuneSetup:
    """The setup of one concurrency level's study: level 1 is the study as named; level N is `<name>-n<N>`.

    At N agents at once every side runs as waves of N agents (runners/concurrency.py), measured live (a recorded
    replay is one agent's turns) on the wall clock (decoding runs on the scheduler's thread, not the agent's),
    the memory model counts N sessions, and the export gives the servers N slots.
    """
    if level == 1:
        return replace(setup, tuner=replace(setup.tuner, concurrency=1))
    name = f"{setup.study.name}-n{level}"
    composed = _copy(setup.composed)
    composed["run"]["concurrency"] = level
    composed["study"]["name"] = name
    return replace(
        setup,
        study=replace(setup.study, name=name),
        tuner=replace(setup.tuner, concurrency=level, measure="live", clock="wall"),
        study_dir=setup.study_dir.parent / name,
        workload=setup.workload.with_(concurrency=level),
        memory=replace(setup.memory, sessions=level),
        fingerprint={**setup.fingerprint, "concurrency": level},
        composed=composed,
    )


def serve_list(value: Any) -> tuple[str, ...]:
    """`tuner.serve` as canonical server names; null means every server. Unknown names list the allowed ones."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    known = {name.lower(): name for name in server_names()}
    out = []
    for item in items:
        name = known.get(str(item).lower())
        if name is None:
            raise ConfigError(f"tuner.serve={item!r} is not a server; choose from: {', '.join(known)}")
        out.append(name)
    return tuple(dict.fromkeys(out))


def resolve_clock(setting: str, device: str, decodes_in_process: bool = True) -> str:
    """`tuner.clock=auto`: CPU seconds of the generating thread when one CPU thread of this process does all the
    generating (under contention they barely move while wall time grows; the runs in docs/benchmarks.md),
    else wall time (several compute threads spin-wait for each other, so CPU time inflates with contention too; on
    a GPU the generating thread mostly waits; a server decodes in its own process, which no clock of this one
    sees). ValueError for `cpu` where another process decodes: every candidate would read the same ~1.000x."""
    if not decodes_in_process:
        if setting == "cpu":
            raise ConfigError(
                "tuner.clock=cpu reads this process's CPU seconds, but with this engine.backend another process "
                "(the server) does the decoding, so every speedup would read ~1.000x; use tuner.clock=wall (or auto)"
            )
        return "wall"
    if setting != "auto":
        return setting
    return "cpu" if device == "cpu" and torch.get_num_threads() == 1 else "wall"


def check(cfg: DictConfig) -> EngineConfig:
    """Validate the runner's and the tuner's values without loading anything; returns the base EngineConfig."""
    base = check_config(cfg)
    given = [
        f"server.{k}"
        for k in ("reference_gguf", "reference_cache_type_k", "reference_cache_type_v")
        if cfg.server.get(k) is not None
    ]
    if given:
        raise ConfigError(
            f"{', '.join(given)}: a study measures ON and OFF on one file and KV type (its recording is replayed); "
            "compare files with python -m runners.run, or tune each file in its own study"
        )
    t, s = cfg.tuner, cfg.study
    if t.trials < 0:
        raise ConfigError(f"tuner.trials must be >= 0, got {t.trials}")
    if t.confirm_repeats < 1:
        raise ConfigError(f"tuner.confirm_repeats must be >= 1, got {t.confirm_repeats}")
    if t.timeout_s is not None and t.timeout_s <= 0:
        raise ConfigError(f"tuner.timeout_s must be positive or null, got {t.timeout_s}")
    parse_budget(t.budget)
    if s.heartbeat_interval < 1:
        raise ConfigError(f"study.heartbeat_interval must be >= 1 s, got {s.heartbeat_interval}")
    _choice(t.measure, MEASURES, "tuner.measure")
    _choice(t.clock, ("auto", *CLOCKS), "tuner.clock")
    resolve_clock(t.clock, "cpu", backend_class(cfg.engine.backend).decodes_in_process)  # a cpu clock for a server
    _choice(t.revisit, REVISITS, "tuner.revisit")
    _choice(s.pruner, PRUNERS, "study.pruner")
    if s.prune_reduction < 2:
        raise ConfigError(
            f"study.prune_reduction must be >= 2 (halving keeps the best 1/prune_reduction), got {s.prune_reduction}"
        )
    _choice(s.sampler, SAMPLERS, "study.sampler")
    serve_list(t.serve)
    if cfg.run.concurrency != 1:
        raise ConfigError(
            f"run.concurrency={cfg.run.concurrency}: the tuner's levels are tuner.concurrency (a list, e.g. "
            f"tuner.concurrency=[1,{cfg.run.concurrency}]: one study per level)"
        )
    levels = concurrency_levels(t.concurrency)
    if t.measure == "replay" and any(level > 1 for level in levels):
        raise ConfigError(
            "tuner.measure=replay with a tuner.concurrency level above 1: replay sends one agent's recorded turns; "
            "several agents at once are measured live (tuner.measure=auto does that per level)"
        )
    if t.measure == "replay" and cfg.space.allow_lossy:
        raise ConfigError(
            "tuner.measure=replay with space.allow_lossy=true: a lossy candidate may change OFF's tokens, so it "
            "cannot be replayed; use tuner.measure=auto (lossy candidates run live) or live"
        )
    if t.measure == "replay" and base.temperature > 0:
        raise ConfigError(
            f"tuner.measure=replay needs greedy decoding (engine.temperature=0, got {base.temperature}): a sampled "
            "candidate does not reproduce OFF's tokens; use tuner.measure=auto or live"
        )
    return base


def server_capabilities(cfg: DictConfig, backend: str) -> Capabilities | None:
    """The kinds of the llama-server a llama-server study runs (probed, printed in one line); None on other backends.

    The space then offers only drafters whose exported --spec-type that binary has (a user's own build may
    lack some). A missing binary is the runner's one-line input error (runners.backends.llama_server_setup), only
    earlier.
    """
    if backend_class(backend).export_target != llama_exporter.TARGET:
        return None
    try:
        binary = find_llama_server(cfg.server.binary)
        caps = probe(binary)
    except (LlamaServerMissing, RuntimeError, ConfigError) as exc:
        raise ConfigError(f"engine.backend={backend}: {exc}") from None
    print(f"llama-server {caps.binary}: --spec-type kinds {', '.join(caps.spec_types)}")
    return caps


def model_digest(model: DictConfig) -> str:
    """sha256 over the contents of the model's files: the target and every head the config names."""
    h = hashlib.sha256()
    for role in ("target", "draft", "mtp", "eagle3"):
        where = model.get(role)
        if where:
            h.update(f"{role}\0{content_digest(where)}\n".encode())
    return h.hexdigest()


def suite_digest(instances: list[Instance], held_out: list[Instance]) -> str:
    """sha256 over every field of the search and held-out tasks (issue, tests, patches): the same ids with other
    contents are another suite."""
    rows = [asdict(i) for i in instances] + [{"held_out": asdict(i)} for i in held_out]
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()


def prepare(cfg: DictConfig) -> TuneSetup:
    """Check the config, then load the tasks, the environment and the models: the study's frozen setup."""
    base = check(cfg)
    serve = serve_list(cfg.tuner.serve)
    caps = server_capabilities(cfg, base.backend)
    heads = available_heads(cfg)  # model.* folders; on llama-server also server.* files and native MTP layers
    space = load_space(
        cfg.space,
        has_draft=heads.draft,
        has_mtp=heads.mtp,
        has_eagle3=heads.eagle3,
        has_server_draft=heads.server_draft,
        backend=base.backend,
        serve=serve,
        server_kinds=frozenset(caps.spec_types) if caps else None,
        server_binary=caps.binary if caps else "llama-server",
    )
    task = cfg.task
    instances = load_suite(task.name, task.split, task.limit, list(task.instance_ids) or None, task.path, task.subset)
    random.Random(cfg.study.seed).shuffle(instances)  # pruning must not see one project first
    held_out = []
    if cfg.tuner.confirm:
        held_out = load_suite(task.name, cfg.tuner.confirm_split, cfg.tuner.confirm_limit, None, task.path, "spread")
    environment = make_environment(task.name, cfg.sandbox.name, OmegaConf.to_container(cfg.sandbox.options))
    study_dir = Path(cfg.run.root) / cfg.study.name
    if cfg.run.threads:
        torch.set_num_threads(cfg.run.threads)
    # What the offered drafters need together (load_space left out those whose heads are missing): the heads
    # loaded once here and the files the backend converts once.
    needs = space.needs
    backend = backend_class(base.backend)
    models = load_for(
        cfg.model,
        needs,
        device=cfg.model.device or cfg.hardware.device,
        weights=backend.decodes_in_process,  # a server decodes: no weights in this process
        server_binary=cfg.server.binary,
        log_dir=study_dir / "server-logs",
    )
    server = backend.settings_from(cfg, models, study_dir / "server-logs", needs)
    workload = Workload.from_config(cfg, models, instances, environment, plain=base, server=server)
    if server is not None:  # OFF's server started once for the study, not once per trial (runners/backends/kept.py)
        workload = workload.with_(kept=KeptBackends())
    fingerprint: dict[str, Any] = {
        "tasks": [i.instance_id for i in instances],
        "repeats": cfg.run.repeats,
        "space": OmegaConf.to_container(cfg.space, resolve=True),
        # what the model and the tasks hold, not where they are: a worker on another machine keeps them elsewhere
        "model_sha256": model_digest(cfg.model),
        "suite_sha256": suite_digest(instances, held_out),
    }
    if backend.fingerprinted:  # builtin studies made before backends existed keep their fingerprint
        fingerprint["backend"] = base.backend
    if serve:
        fingerprint["serve"] = list(serve)
    choices = server_choice.study_choices(list(cfg.tuner.targets), list(cfg.tuner.cache_types), server)
    if choices.any:  # other files or KV types are other trials: another study
        fingerprint["choices"] = {"targets": list(choices.targets), "cache_types": list(choices.cache_types)}
    if needs.server_draft and server is not None and server.dflash_gguf:
        fingerprint["dflash_gguf"] = str(server.dflash_gguf)  # another draft is another study
    t, s, tr = cfg.tuner, cfg.study, cfg.tracking
    return TuneSetup(
        study=StudySettings(
            name=s.name,
            storage=s.storage,
            seed=s.seed,
            sampler=s.sampler,
            startup_trials=s.startup_trials,
            pruner=s.pruner,
            prune_p=s.prune_p,
            prune_startup_steps=s.prune_startup_steps,
            prune_reduction=s.prune_reduction,
            heartbeat_interval=s.heartbeat_interval,
            max_retry=s.max_retry,
        ),
        tuner=TunerSettings(
            trials=t.trials,
            timeout_s=t.timeout_s,
            max_regressions=t.max_regressions,
            confirm=t.confirm,
            confirm_split=t.confirm_split,
            confirm_limit=t.confirm_limit,
            confirm_repeats=t.confirm_repeats,
            bootstrap_resamples=t.bootstrap_resamples,
            measure=t.measure,
            clock=resolve_clock(t.clock, models.target.device.type, backend.decodes_in_process),
            revisit=t.revisit,
            serve=serve,
            min_speedup=float(t.min_speedup),
            levels=concurrency_levels(t.concurrency),
            budget_s=parse_budget(t.budget),
        ),
        tracking=TrackingSettings(enabled=tr.enabled, uri=tr.uri, experiment=tr.experiment),
        study_dir=study_dir,
        space=space,
        base=base,
        workload=workload,
        held_out=held_out,
        memory=(
            constraints.memory_facts(
                models.target_path,
                models,
                models.draft_path,
                vram_gib=cfg.hardware.vram_gib,
                overhead_gib=cfg.hardware.runtime_overhead_gib,
            )
            if server is None
            else constraints.served_memory_facts(
                server, vram_gib=cfg.hardware.vram_gib, overhead_gib=cfg.hardware.runtime_overhead_gib
            )
        ),
        server=server,
        names={
            "hardware": cfg.hardware.name,
            "model": cfg.model.name,
            "task": task.name,
            "split": task.split,
            "task_path": task.path,
            "backend": base.backend,
            "vram_gib": f"{cfg.hardware.vram_gib:g}",
        },
        model_paths={
            "target": cfg.model.target,
            "draft": cfg.model.draft,
            "mtp": cfg.model.get("mtp"),
            "eagle3": cfg.model.get("eagle3"),
        },
        fingerprint=fingerprint,
        composed=OmegaConf.to_container(cfg, resolve=True),  # type: ignore[arg-type]
        progress=cfg.run.progress,
        choices=choices,
    )
