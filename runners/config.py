"""Structured configs: the schema behind `conf/` (Hydra validates every override against it).

A wrong key (`engine.gama=4`) fails in Hydra with the key and the node named; a wrong value for a
field with a closed set of choices fails in `check_config` naming the allowed values; a wrong group
option (`hardware=rtx9999`) fails in Hydra listing the available options. All of this happens
before any model is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from agents.loop import AgentConfig
from common.errors import ConfigError
from engine.acceptance import ACCEPTANCE_RULES
from engine.drafters import DRAFTERS, DrafterSpec, is_known_drafter
from engine.engine import Engine, EngineConfig
from engine.forward import PATHS
from engine.gamma import GAMMA_POLICIES
from runners.backends import backend_class
from runners.models import resolve_model_path
from serving.gguf import ALL_TYPES as GGUF_TYPES
from serving.gguf_file import is_gguf, read_gguf
from serving.gguf_memory import KV_TYPES
from tasks.suites import SUBSETS


@dataclass
class HardwareConf:
    """The GPU a configuration is tuned for; on a machine without CUDA only its VRAM ceiling applies."""

    name: str = MISSING  # short name, e.g. rtx4060
    vram_gib: float = MISSING  # memory ceiling the configuration must fit (weights + KV + draft)
    bandwidth_gbs: float = 0.0  # memory bandwidth, GB/s (documentation for the speedup model)
    bf16_tflops: float = 0.0  # dense bf16 throughput, TFLOP/s
    device: str = "auto"  # torch device to measure on: auto | cpu | cuda | cuda:N
    runtime_overhead_gib: float = 0.0  # memory the runtime holds besides weights, KV and workspace (CUDA context ...)


@dataclass
class TaskConf:
    """Which suite, split and instances to run."""

    name: str = "swe-lite"  # swe-lite | swe-bench-lite
    split: str = "dev"  # swe-lite: train | dev | test (| probe with task.path); swe-bench-lite: dev | test
    limit: int | None = None  # run only N instances (which ones: `subset`)
    subset: str = "spread"  # spread: `limit` evenly spaced over the split (every project) | first: the first `limit`
    instance_ids: list[str] = field(default_factory=list)  # run only these instances
    path: str | None = None  # swe-bench-lite: a local copy (JSONL/Parquet/saved dataset); swe-lite: a probe folder


@dataclass
class ModelConf:
    """Target and draft models: a local folder, a cached hub id, or `tiny` (created on first use)."""

    name: str = "tiny"  # label recorded in MLflow and predictions
    target: str = MISSING  # path / hub id of the target model; `tiny` = a random model built by engine.tiny
    draft: str | None = "tiny"  # draft model for drafter=draft_model; null = none
    mtp: str | None = None  # MTP module folder for engine=mtp / mtp+ngram (python -m training.mtp writes one)
    eagle3: str | None = None  # EAGLE-3 head folder for engine=eagle3 / eagle3+ngram (python -m training.eagle3)
    dtype: str = "auto"  # auto | float32 | float16 | bfloat16 | float64
    forward: str = "auto"  # numeric path: auto | transformers | torch | onednn (engine/forward.py)
    device: str | None = None  # overrides hardware.device when set


@dataclass
class SandboxConf:
    """Where agent commands and evaluations run."""

    name: str = "local"  # local | docker
    options: dict[str, Any] = field(default_factory=dict)  # passed to the sandbox constructor


@dataclass
class TrackingConf:
    """MLflow logging."""

    enabled: bool = True  # false = a null tracker (no MLflow import, no files)
    uri: str | None = None  # null = sqlite:///<runs root>/mlflow.db
    experiment: str = "spectune"  # MLflow experiment name


@dataclass
class ServerConf:
    """The llama-server that `engine.backend=llama-server` measures on (the built-in engine ignores this)."""

    binary: str | None = None  # llama-server executable; null: $SPECTUNE_LLAMA_SERVER, spectune's build, PATH ...
    # how model.target / model.draft are converted (f32: exact): f32 | f16 | bf16 | q8_0 by the converter, or a
    # llama-quantize type (q4_k_m, q6_k, ...: serving/quantize.py QUANT_TYPES) made from the f32
    gguf_type: str = "f32"
    target_gguf: str | None = None  # a GGUF of the target to use as is (null: convert model.target, cached)
    draft_gguf: str | None = None  # a GGUF of the draft to use as is (null: convert model.draft, cached)
    mtp_gguf: str | None = None  # target + MTP module as one mimo2 GGUF to use as is (null: serving.mtp_gguf, cached)
    eagle3_gguf: str | None = None  # the EAGLE-3 head as a GGUF to use as is (null: serving.eagle3_gguf, cached)
    # a DFlash (or DSpark) draft GGUF, trained elsewhere, for drafters dflash / dspark (llama-server only)
    dflash_gguf: str | None = None
    context: int | None = None  # -c in tokens; null: the target's own context length
    cache_type_k: str = "f16"  # -ctk: the KV cache's K type (f16 llama-server's default; q8_0, q4_0 ... save memory)
    cache_type_v: str = "f16"  # -ctv: the KV cache's V type
    threads: int | None = None  # -t; null: run.threads, else llama.cpp's default
    start_timeout_s: float = 120.0  # seconds a server may take to load and answer /health
    # OFF on other weights or KV types than ON (the runner only): e.g. ON = a Q4_K_M file with draft-mtp against
    # OFF = the Q8_0 file; ON is then compared with that reference live, divergences expected and counted
    reference_gguf: str | None = None  # OFF's GGUF (the same vocabulary); null: ON's target file
    reference_cache_type_k: str | None = None  # OFF's -ctk; null: server.cache_type_k
    reference_cache_type_v: str | None = None  # OFF's -ctv; null: server.cache_type_v


@dataclass
class RunConf:
    """How the measurement is repeated and where it is written."""

    name: str = MISSING  # folder under run.root; defaults to task-split-drafter-timestamp
    root: str = "runs"  # output root (relative to the working directory)
    repeats: int = 1  # each task runs OFF and ON this many times
    seed: int = 0  # sampling seed (sessions use seed + task index, identical for OFF and ON)
    warmup: bool = True  # one untimed generation per engine before measuring
    concurrency: int = 1  # agents in flight at once per side: one engine batch (or server with -np N) serves them
    threads: int | None = None  # torch CPU threads; null = torch's default
    progress: bool = True  # show a progress bar
    resume: bool = False  # reuse runs/<name>/: keep its finished task runs, run the rest, one summary
    overwrite: bool = False  # reuse runs/<name>/: delete the run there first


@dataclass
class Config:
    """The whole configuration of `python -m runners.run`."""

    hardware: HardwareConf = MISSING
    task: TaskConf = field(default_factory=TaskConf)
    model: ModelConf = field(default_factory=ModelConf)
    engine: EngineConfig = field(default_factory=EngineConfig)  # the engine's own schema: one place per knob
    agent: AgentConfig = field(default_factory=AgentConfig)  # the agent's own schema
    sandbox: SandboxConf = field(default_factory=SandboxConf)
    tracking: TrackingConf = field(default_factory=TrackingConf)
    run: RunConf = field(default_factory=RunConf)
    server: ServerConf = field(default_factory=ServerConf)  # used by engine.backend=llama-server only


SUITES = ("swe-lite", "swe-bench-lite")
SANDBOXES = ("local", "docker")


def register_configs() -> None:
    """Register the schema so `conf/` files and command-line overrides are type-checked by Hydra."""
    cs = ConfigStore.instance()
    # The top-level schema types every group node, so group files need no schema of their own (and
    # none shows up among the options Hydra lists for a wrong group value).
    cs.store(name="config_schema", node=Config)


def _choice(value: Any, allowed: tuple[str, ...] | list[str], key: str) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of: {', '.join(allowed)}")


def engine_config(conf: Any, seed: int | None = None) -> EngineConfig:
    """The engine's own config from the Hydra `engine` node (the candidate, speculation ON).

    The node's schema is `EngineConfig` itself, so this is a plain conversion; `seed` (the commands pass
    `run.seed`, the one seed of a run) replaces the node's.
    """
    values = OmegaConf.to_container(conf, resolve=True) if isinstance(conf, DictConfig) else dict(vars(conf))
    if seed is not None:
        values["seed"] = seed
    values["options"] = dict(values.get("options") or {})
    return EngineConfig(**values)


def agent_config(conf: Any) -> AgentConfig:
    """The agent's limits from the Hydra `agent` node (its schema is `AgentConfig` itself)."""
    values = OmegaConf.to_container(conf, resolve=True) if isinstance(conf, DictConfig) else dict(vars(conf))
    return AgentConfig(**values)


def baseline_config(candidate: EngineConfig) -> EngineConfig:
    """Speculation OFF with the candidate's sampling: the reference every candidate is compared with."""
    return EngineConfig(
        drafter="none",
        temperature=candidate.temperature,
        top_k=candidate.top_k,
        top_p=candidate.top_p,
        seed=candidate.seed,
        backend=candidate.backend,  # OFF is the same backend without speculation
    )


def check_config(cfg: Any) -> EngineConfig:
    """Validate closed choices and ranges without loading anything; returns the candidate EngineConfig."""
    return check_candidate(cfg)[0]


def check_candidate(cfg: Any) -> tuple[EngineConfig, DrafterSpec]:
    """`check_config`, returning also the candidate's drafter, resolved once: its `Needs` say which heads and
    files the run loads (runners.models.load_for, Backend.settings_from)."""
    model = cfg.model
    if (isinstance(model, DictConfig) and OmegaConf.is_missing(model, "target")) or not model.target:
        raise ConfigError(
            f"model.target is not set: model={model.name} needs model.target=/path/to/model-folder "
            "(a local folder or a cached hub id; with engine.backend=llama-server also a GGUF file: model=gguf "
            "model.target=FILE.gguf; model.draft=... for engine=draft_model)"
        )
    if is_gguf(model.target) and backend_class(cfg.engine.backend).decodes_in_process:
        raise ConfigError(
            f"model.target={model.target}: a GGUF file runs on engine.backend=llama-server only (the built-in "
            "engine needs the Hugging Face folder); add engine.backend=llama-server"
        )
    if cfg.run.resume and cfg.run.overwrite:
        raise ConfigError("run.resume=true and run.overwrite=true exclude each other; pass one of them")
    _choice(cfg.task.name, SUITES, "task")
    _choice(cfg.task.subset, SUBSETS, "task.subset")
    _choice(cfg.sandbox.name, SANDBOXES, "sandbox")
    _choice(cfg.model.forward, list(PATHS), "model.forward")
    backend_class(cfg.engine.backend)  # names the allowed backends when it is not one
    _choice(cfg.server.gguf_type, list(GGUF_TYPES), "server.gguf_type")
    _choice(cfg.server.get("cache_type_k", "f16"), list(KV_TYPES), "server.cache_type_k")
    _choice(cfg.server.get("cache_type_v", "f16"), list(KV_TYPES), "server.cache_type_v")
    for side in ("k", "v"):
        if cfg.server.get(f"reference_cache_type_{side}") is not None:
            _choice(cfg.server[f"reference_cache_type_{side}"], list(KV_TYPES), f"server.reference_cache_type_{side}")
    if not is_known_drafter(cfg.engine.drafter):
        _choice(cfg.engine.drafter, [*sorted(DRAFTERS), "A+B (e.g. mtp+ngram)"], "engine.drafter")
    _choice(cfg.engine.acceptance, sorted(ACCEPTANCE_RULES), "engine.acceptance")
    _choice(cfg.engine.gamma_policy, list(GAMMA_POLICIES), "engine.gamma_policy")
    if cfg.run.repeats < 1:
        raise ConfigError(f"run.repeats must be >= 1, got {cfg.run.repeats}")
    if cfg.run.concurrency < 1:
        raise ConfigError(f"run.concurrency must be >= 1 (agents in flight at once), got {cfg.run.concurrency}")
    if cfg.hardware.vram_gib <= 0:
        raise ConfigError(f"hardware.vram_gib must be positive, got {cfg.hardware.vram_gib}")
    agent_config(cfg.agent)  # AgentConfig's own range checks
    candidate = engine_config(cfg.engine, cfg.run.seed)
    drafter, _ = Engine.validate(candidate)  # option names and values, with the allowed ones in the message
    needs = drafter.needs
    heads = available_heads(cfg) if needs.eagle3 or needs.mtp else None  # a GGUF target's metadata is read
    if needs.eagle3 and not (heads and heads.eagle3):
        raise ConfigError(
            f"engine.drafter={candidate.drafter} needs an EAGLE-3 head: model={cfg.model.name} has model.eagle3=null "
            "(pass model.eagle3=DIR; python -m training.eagle3 --target DIR --out DIR trains one; on "
            "engine.backend=llama-server server.eagle3_gguf=FILE)"
        )
    if needs.mtp and not (heads and heads.mtp):
        raise ConfigError(
            f"engine.drafter={candidate.drafter} needs MTP weights: model={cfg.model.name} has model.mtp=null "
            "(pass model.mtp=DIR; python -m training.mtp --target DIR --out DIR trains one; on "
            "engine.backend=llama-server a target GGUF with MTP layers, or server.mtp_gguf=FILE)"
        )
    return candidate, drafter


@dataclass(frozen=True)
class Heads:
    """What a run can draft with besides n-grams: each True when its weights are there for the run's backend."""

    draft: bool  # a draft model: model.draft, or server.draft_gguf on llama-server
    mtp: bool  # MTP weights: model.mtp; on llama-server also server.mtp_gguf or the target GGUF's own MTP layers
    eagle3: bool  # an EAGLE-3 head: model.eagle3, or server.eagle3_gguf on llama-server
    server_draft: bool  # a DFlash / DSpark draft GGUF (server.dflash_gguf), llama-server only


def target_gguf_file(cfg: Any) -> str | None:
    """The GGUF the target runs as on llama-server when the user gave one: model.target=F.gguf or server.target_gguf."""
    if is_gguf(cfg.model.target):
        return str(cfg.model.target)
    server = cfg.get("server")
    return server.get("target_gguf") if server is not None else None


def native_mtp_layers(cfg: Any) -> int:
    """MTP layers inside the user's target GGUF (its <arch>.nextn_predict_layers); 0 without one or on builtin."""
    if backend_class(cfg.engine.backend).decodes_in_process:
        return 0
    file = target_gguf_file(cfg)
    if not file:
        return 0
    return read_gguf(resolve_model_path(file)).nextn_layers


def available_heads(cfg: Any) -> Heads:
    """Which drafters' weights the run has: model.* folders, and on llama-server the server.* files and the
    target GGUF's native MTP layers (so a GGUF that carries MTP heads offers draft-mtp with nothing else)."""
    model = cfg.model
    server = cfg.get("server")
    served = not backend_class(cfg.engine.backend).decodes_in_process and server is not None
    file = (lambda key: bool(server.get(key))) if served else (lambda key: False)
    return Heads(
        draft=bool(model.get("draft")) or file("draft_gguf"),
        mtp=bool(model.get("mtp")) or file("mtp_gguf") or native_mtp_layers(cfg) > 0,
        eagle3=bool(model.get("eagle3")) or file("eagle3_gguf"),
        server_draft=file("dflash_gguf"),
    )
