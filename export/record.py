"""What the exporters read (ExportRecord) and what they report back (Mapping rows)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from engine.acceptance import AcceptanceRule
from engine.drafters import resolve_drafter
from engine.engine import Engine, EngineConfig

EXACT, APPROXIMATE, NONE = "exact", "approximate", "none"  # how well one setting maps onto a server
FITS = (EXACT, APPROXIMATE, NONE)


@dataclass
class ExportRecord:
    """Everything the writers need about the best configuration and how it was measured."""

    engine: EngineConfig  # the best configuration (speculation ON)
    model_name: str  # the model profile's name (conf/model/<name>.yaml)
    target: str  # target weights: a local folder or a hub id (servers need their own format, e.g. GGUF)
    draft: str | None  # draft weights for drafter=draft_model, else None
    hardware: str  # the hardware profile the tuner targeted (conf/hardware/<name>.yaml)
    measured_on: str  # where timings were really taken: "cpu" | "cuda"
    context: int  # largest context (tokens) that fits the VRAM ceiling; 0 = unknown -> server default
    confirmed: dict[str, Any]  # confirmation numbers (tuner/confirm.py); {} or None values when not confirmed
    cost_ratios: dict[str, Any] | None  # {"verify_over_step": R, "draft_over_verify": C} in spectune's engine
    composed_config: dict[str, Any]  # the full Hydra config (plain dict) that `python -m runners.run` reruns
    # MTP weights for drafter=mtp: the module folder (model.mtp), or a GGUF holding target + module (serving.mtp_gguf)
    mtp: str | None = None
    # Agents at once the configuration was measured with (a tuner.concurrency level): the servers get that many slots
    concurrency: int = 1
    # EAGLE-3 head for drafter=eagle3: its HF folder (vLLM and SGLang load it; python -m training.eagle3 writes one)
    eagle3: str | None = None
    # The head as the GGUF a llama-server study measured (serving.eagle3_gguf), None: convert the folder
    eagle3_gguf: str | None = None
    # A DFlash / DSpark draft GGUF the user brought (server.dflash_gguf), for drafters dflash and dspark
    dflash_gguf: str | None = None
    # The llama-server binary the study measured (engine.backend=llama-server) or found; None: none was known
    server_binary: str | None = None
    # llama-server's KV cache types (-ctk, -ctv) the study measured; f16 is the server's default
    cache_types: tuple[str, str] = ("f16", "f16")
    # The target GGUF's quantization as its metadata states it (general.file_type: F32, Q8_0, Q4_K_M ...); None:
    # no GGUF was measured (the export names the folder to convert)
    target_quantization: str | None = None
    # GGUF files made for the export where the study measured folders (the bundled models), by role:
    # target, draft, mtp (the mimo2 file), eagle3; a role without one keeps its <...-gguf-of:PATH> placeholder
    gguf_files: dict[str, str] = field(default_factory=dict)
    # The reference OFF ran on when the winner chose another file or KV type (tuner.targets / cache_types):
    # "FILE.gguf, KV f16"; its speedup then includes what the file and KV type change by themselves
    reference: str | None = None


@dataclass(frozen=True)
class Mapping:
    """How one spectune setting carries over to one serving target."""

    setting: str  # the spectune setting, e.g. "gamma=4" or "suffix.scope=engine"
    target: str  # "llama-server" | "vLLM" | "SGLang"
    fit: str  # exact | approximate | none
    reason: str  # why, in one or two sentences

    def __post_init__(self) -> None:
        if self.fit not in FITS:
            raise ValueError(f"fit must be one of {FITS}, got {self.fit!r}")


def typed_options(engine: EngineConfig) -> tuple[Any, AcceptanceRule]:
    """The drafter's options dataclass and the acceptance rule, defaults filled, as the engine sees them."""
    # The engine's own validation routes and converts options, so exports read the values it ran with.
    drafter, rule = Engine.validate(engine)
    return drafter.options, rule


def draft_length(engine: EngineConfig) -> int:
    """The longest draft spectune asks for: gamma, or max_gamma when the heuristic policy may grow to it."""
    return engine.max_gamma if engine.gamma_policy == "heuristic" else engine.gamma


def gamma_rows(engine: EngineConfig, target: str, knob: str, offset: int = 0) -> list[Mapping]:
    """The row for gamma and the draft-length policy on a server whose length knob is `knob` (= length + offset)."""
    plus = f" + {offset}" if offset else ""
    if engine.gamma_policy == "heuristic":
        return [
            Mapping(
                f"gamma_policy=heuristic (gamma={engine.gamma}, max_gamma={engine.max_gamma})",
                target,
                APPROXIMATE,
                f"{target} has no draft length that grows after a full accept and shrinks after a rejection: "
                f"{knob} = the heuristic's ceiling max_gamma{plus} = {engine.max_gamma + offset}, so drafts there "
                "can run longer than spectune's on stretches where it had shrunk them",
            )
        ]
    return [Mapping(f"gamma={engine.gamma}", target, EXACT, f"{knob} = gamma{plus} = {engine.gamma + offset}")]


def model_draft_rows(engine: EngineConfig, target: str, drafter: str, knob: str, greedy: str) -> list[Mapping]:
    """What a drafting model (`drafter`: a draft model, an EAGLE-3 head) does differently on a server that drafts
    `knob` tokens with no early stop and drafts greedily (`greedy`: where its source says so)."""
    rows = []
    if engine.gamma_policy == "confidence":
        why = f"no key stops {drafter} early on low confidence: {target} drafts {knob}"
        rows.append(Mapping(f"gamma_policy=confidence (confidence={engine.confidence})", target, NONE, why))
    if engine.temperature > 0:
        why = f"{target} drafts greedily {greedy}; spectune samples the draft: both lossless, acceptance can differ"
        rows.append(Mapping(f"temperature={engine.temperature} with {drafter}", target, APPROXIMATE, why))
    return rows


HALF_EXPORT = "only the {child} part is exported"  # a combination a server would run only part of


def half_export(child: str, why: str) -> str:
    """The reason of a combination exported as its lookup child alone (a server runs it only in part)."""
    return f"{HALF_EXPORT.format(child=child)} ({why})"


def is_half_export(reason: str) -> bool:
    """Whether a mapping row's reason says only part of a combination is exported (half_export)."""
    return reason.startswith(HALF_EXPORT.split("{", 1)[0])


def other_tokenizer_reason(record: ExportRecord) -> str | None:
    """How the draft's tokenizer differs from the target's, when the record drafts with a draft model; else None.

    None too where either tokenizer cannot be read here (a hub id, a GGUF file, a placeholder): such a draft is
    exported as a same-tokenizer draft, as before. The exporters turn a reason into speculation off (llama-server,
    SGLang) or vLLM's heterogeneous-vocabulary draft_model.
    """
    if record.draft is None or not resolve_drafter(record.engine.drafter).needs.draft_model:
        return None
    return _folders_differ(str(record.target), str(record.draft))


@cache
def _folders_differ(target: str, draft: str) -> str | None:
    """engine.loading.tokenizers_differ of two local model folders' tokenizers (None where either is unreadable)."""
    from transformers import AutoTokenizer

    from engine.loading import tokenizers_differ

    try:
        if not (Path(target).is_dir() and Path(draft).is_dir()):
            return None
        tokenizers = [AutoTokenizer.from_pretrained(p, local_files_only=True) for p in (target, draft)]
    except Exception:  # transformers raises many kinds for a folder without a usable tokenizer
        return None
    return tokenizers_differ(*tokenizers, target, draft)


@dataclass(frozen=True)
class Eagle3Head:
    """What the vLLM and SGLang exports read of an EAGLE-3 head folder (engine/eagle3.py's HF layout)."""

    path: Path
    config: dict[str, Any]  # its config.json
    layer_ids: list[int]  # eagle_aux_hidden_state_layer_ids: inputs of these target decoder layers (llama.cpp, vLLM)
    target_layers: int | None  # the target's decoder layer count (spectune block), None where not recorded
    vocab_size: int  # the target's vocabulary
    draft_vocab_size: int  # rows of its LM head
    has_d2t: bool  # model.safetensors holds d2t

    @property
    def norm_before_residual(self) -> bool:
        """Whether the layer's residual is hidden_norm(g) (config key norm_before_residual), not g."""
        return bool(self.config.get("norm_before_residual", False))


def read_eagle3_head(folder: str | Path | None) -> Eagle3Head | None:
    """The head at `folder`, or None where its config.json cannot be read here (a placeholder or another machine)."""
    if not folder:
        return None
    path = Path(folder)
    try:
        config = json.loads((path / "config.json").read_text())
        ids = [int(i) for i in config["eagle_aux_hidden_state_layer_ids"]]
        vocab, draft_vocab = int(config["vocab_size"]), int(config.get("draft_vocab_size") or config["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    layers = ((config.get("spectune") or {}).get("target") or {}).get("num_hidden_layers")
    return Eagle3Head(path, config, ids, layers, vocab, draft_vocab, _has_tensor(path / "model.safetensors", "d2t"))


def _has_tensor(path: Path, name: str) -> bool:
    """Whether the safetensors file at `path` holds tensor `name` (its JSON header only; False if unreadable)."""
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            return name in json.loads(f.read(size))
    except (OSError, ValueError):
        return False


# The best configuration found at each measured concurrency level (agents in flight at once), as the tuner
# hands it to the exporters: None where nothing beat speculation OFF at that level.
PerLevel = dict[int, EngineConfig | None]


def levels_in_order(best: PerLevel) -> list[int]:
    """The measured levels of `best`, lowest first; ValueError when there is none or a level is not an int >= 1."""
    if not best:
        raise ValueError("no concurrency level measured: give the best configuration of at least one level")
    for level, config in best.items():
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            raise ValueError(f"a concurrency level is a whole number of agents >= 1, got {level!r}")
        if config is not None and not isinstance(config, EngineConfig):
            raise ValueError(f"level {level}: expected an EngineConfig or None (speculation off), got {config!r}")
    return sorted(best)


def speculation_on(config: EngineConfig | None) -> bool:
    """Whether a level's best speculates (None and drafter=none are both speculation off)."""
    return config is not None and config.drafter != "none"


def off_record(record: ExportRecord) -> ExportRecord:
    """The same export with speculation off (sampling and seed kept, no draft or MTP weights)."""
    e = record.engine
    plain = EngineConfig(drafter="none", temperature=e.temperature, top_k=e.top_k, top_p=e.top_p, seed=e.seed)
    return replace(record, engine=plain, draft=None, mtp=None, eagle3=None, eagle3_gguf=None, dflash_gguf=None)


def at_level(record: ExportRecord, config: EngineConfig | None) -> ExportRecord:
    """`record` with one level's best configuration, or speculation off where that level has none."""
    return replace(record, engine=config) if speculation_on(config) else off_record(record)


def _short(value: Any) -> Any:
    """A tuned float option in 4 significant digits (0.08880673940430867 -> 0.08881); anything else as it is."""
    return f"{value:.4g}" if isinstance(value, float) else value


def level_configuration(config: EngineConfig | None) -> str:
    """A level's best in one short line: drafter, draft length, policy and options, or 'speculation off'."""
    if not speculation_on(config):
        return "speculation off"
    policy = "" if config.gamma_policy == "fixed" else f" {config.gamma_policy}"
    ceiling = f" max_gamma={config.max_gamma}" if config.gamma_policy == "heuristic" else ""
    options = "".join(f" {k}={_short(v)}" for k, v in sorted(config.options.items()))
    return f"{config.drafter} gamma={config.gamma}{policy}{ceiling}{options}"
