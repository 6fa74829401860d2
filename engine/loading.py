"""Load a causal LM and its tokenizer for the engine, with clear errors when a model cannot be found.

Resolves device and dtype names, loads local Hugging Face folders (or hub ids already in the local cache),
and compares a draft's tokenizer with the target's (`tokenizer_difference`). A folder whose files are
there but broken (a config.json that is not JSON or names no architecture, an empty / truncated / corrupt safetensors
file, tensors missing or of the wrong shape) raises ModelFileError naming the file, never a partly
random model. Non-goals: downloading by default, quantisation, multi-GPU sharding (no `device_map`:
that needs `accelerate`, which is not a dependency).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.errors import HFValidationError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from common.errors import ConfigError, UnsupportedConfig
from engine.forward import check_path, decoder_layers, first_layers, make_forward
from engine.host import probe

DEVICES = ("auto", "cpu", "cuda", "cuda:N")
DTYPE_ALIASES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "float64": torch.float64,
    "fp64": torch.float64,
}
# Set to "1" to let a hub id that is not in the local cache be downloaded.
ALLOW_HUB_ENV = "SPECTUNE_ALLOW_HUB"
# Any one of these marks a folder as carrying a tokenizer that AutoTokenizer can build.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
# Encoded by both tokenizers in check_same_tokenizer: equal vocabularies can still split text differently
# (normalizer, pre-tokenizer, an added BOS), and the draft's ids must mean the same as the target's.
_PROBE_TEXT = "def add(a, b):\n    return a + b  # Ünïcode, tabs\tand 3.14 <|im_end|>"


class ModelNotFoundError(FileNotFoundError):
    """A model folder or hub id that could not be found or loaded."""


class ModelFileError(ConfigError):
    """A model folder whose files exist but cannot be used (corrupt JSON, broken or mismatched weights)."""


class TokenizerMismatchError(UnsupportedConfig):
    """Target and draft tokenizers differ, so draft token ids would not mean the same to the target.

    Unsupported, not broken: a candidate that drafts with this draft model cannot run on this target.
    """


def resolve_device(device: str) -> torch.device:
    """Turn "auto", "cpu", "cuda" or "cuda:N" into a torch.device that exists on this machine."""
    name = device.strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", name)
    if match is None:
        raise ConfigError(f"unknown device {device!r}; allowed: {', '.join(DEVICES)}")
    if not torch.cuda.is_available():
        raise ConfigError(
            f"device {device!r} requested but CUDA is not available (torch {torch.__version__}); "
            "use --device cpu or --device auto"
        )
    if match.group(1) is not None and int(match.group(1)) >= torch.cuda.device_count():
        raise ConfigError(f"device {device!r} does not exist: this machine has {torch.cuda.device_count()} GPU(s)")
    return torch.device(name)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16, AMX, AVX-NE-CONVERT): oneDNN runs bf16 faster than fp32."""
    return probe().bf16_native


def resolve_dtype(dtype: str, device: torch.device | str, checkpoint: torch.dtype | None = None) -> torch.dtype:
    """Turn a dtype name into a torch.dtype.

    "auto": bfloat16 on CUDA (float16 before Ampere). On a CPU: the checkpoint's own bfloat16 where the
    CPU computes bf16 natively (its own precision, and oneDNN's fastest path there), else float32; a
    float32 checkpoint is never cast down (`checkpoint` is its config's dtype, None when unknown).
    """
    name = dtype.strip().lower()
    if name == "auto":
        if torch.device(device).type != "cuda":
            if checkpoint == torch.bfloat16 and cpu_has_native_bf16():
                return torch.bfloat16
            # Without native bf16, bf16/fp16 matmuls are slow on a CPU; float32 holds either exactly.
            return torch.float32
        # Pre-Ampere GPUs lack fast bf16; fp16 keeps the memory saving there.
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if name not in DTYPE_ALIASES:
        raise ConfigError(f"unknown dtype {dtype!r}; allowed: auto, {', '.join(DTYPE_ALIASES)}")
    return DTYPE_ALIASES[name]


def _ids(value: Any) -> set[int]:
    """An eos_token_id field (None, an int, or a list of ints) as a set."""
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value}


@dataclass(eq=False)  # identity equality: comparing models field by field is meaningless and slow
class LoadedModel:
    """A model in eval mode on its device and dtype, with its tokenizer and where it came from."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    path: str
    device: torch.device
    dtype: torch.dtype
    forward_path: str = "auto"  # auto | transformers | torch | onednn (engine/forward.py)
    _forward: Any = field(default=None, init=False, repr=False)
    _views: dict[int, LoadedModel] = field(default_factory=dict, init=False, repr=False)  # first_layers(k)

    @property
    def forward(self):
        """This model's forward on its numeric path, built (weights fused and packed) on first use."""
        if self._forward is None:
            self._forward = make_forward(self.model, self.forward_path)
        return self._forward

    @property
    def num_layers(self) -> int:
        """Decoder layers of the model."""
        return len(decoder_layers(self.model))

    def first_layers(self, k: int) -> LoadedModel:
        """This model cut after its first `k` decoder layers (final norm and LM head kept; weights shared).

        Built once per k and kept, so its forward (and any packed weights) is shared by every session.
        """
        if k not in self._views:
            self._views[k] = LoadedModel(
                model=first_layers(self.model, k),
                tokenizer=self.tokenizer,
                path=f"{self.path} (first {k} of {self.num_layers} layers)",
                device=self.device,
                dtype=self.dtype,
                forward_path=self.forward_path,
            )
        return self._views[k]

    @property
    def vocab_size(self) -> int:
        """Rows of the model's embedding (config.vocab_size); may exceed the tokenizer's size (padding)."""
        return int(self.model.config.vocab_size)

    @property
    def eos_token_ids(self) -> set[int]:
        """Every id that ends generation: generation_config's, config's and the tokenizer's eos ids."""
        ids = _ids(getattr(self.model.config, "eos_token_id", None))
        generation_config = getattr(self.model, "generation_config", None)
        if generation_config is not None:
            # Chat checkpoints list end-of-turn here (e.g. Qwen2.5-Instruct: <|im_end|> and <|endoftext|>).
            ids |= _ids(generation_config.eos_token_id)
        if self.tokenizer is not None:  # in-process fakes (engine.testing) have no tokenizer
            ids |= _ids(self.tokenizer.eos_token_id)
        return ids


def _looks_like_path(name: str) -> bool:
    """Whether `name` was meant as a filesystem path rather than a hub id like "org/model"."""
    if name.startswith(("/", ".", "~")) or name.endswith(("/", os.sep)):
        return True
    separators = [os.sep] + ([os.altsep] if os.altsep else [])
    if not any(sep in name for sep in separators):
        return False
    # Hub ids have at most one "/"; a relative path whose first folder exists here was meant as a path.
    first = re.split("|".join(re.escape(s) for s in separators), name)[0]
    return name.count("/") > 1 or Path(first).is_dir()


def local_folder(name: str) -> Path | None:
    """The model folder `name` points to, None for a hub id, or ModelNotFoundError for a bad path."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelNotFoundError(f"model path {path} is a file; expected a model folder containing config.json")
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"model folder {path} has no config.json, so it is not a model folder")
        if not any((path / f).is_file() for f in _TOKENIZER_FILES):
            raise ModelNotFoundError(f"model folder {path} has no tokenizer (looked for {', '.join(_TOKENIZER_FILES)})")
        return path.resolve()
    if _looks_like_path(name):
        raise ModelNotFoundError(f"model folder not found: looked for {path.absolute()} (from {name!r})")
    return None


# JSON files of a model folder that transformers parses; each is checked so a broken one is named.
_JSON_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "model.safetensors.index.json",
)


def _cause(exc: BaseException) -> str:
    """The first line of an exception's message (or its type)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _read_json(path: Path) -> Any:
    """The JSON content of a model file; ModelFileError naming the file when it is empty or not JSON."""
    raw = path.read_bytes()
    if not raw.strip():
        raise ModelFileError(f"{path} is empty; expected JSON")
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8 text"
        raise ModelFileError(f"{path} is not valid JSON{where} ({reason})") from exc


def _checkpoint_dtype(folder: Path) -> torch.dtype | None:
    """The dtype a folder's config.json says its weights are in (`dtype`, older `torch_dtype`), if readable."""
    try:
        config = json.loads((folder / "config.json").read_bytes())
    except (OSError, ValueError):
        return None  # _check_folder_files reports a broken config with its name
    name = config.get("dtype") or config.get("torch_dtype") if isinstance(config, dict) else None
    return DTYPE_ALIASES.get(str(name).lower()) if name else None


def _check_folder_files(folder: Path) -> list[Path]:
    """Check the folder's JSON files and safetensors headers; returns the safetensors weight files."""
    for name in _JSON_FILES:
        if (folder / name).is_file():
            data = _read_json(folder / name)
            if not isinstance(data, dict):
                raise ModelFileError(f"{folder / name} holds a JSON {type(data).__name__}, not an object")
    config = _read_json(folder / "config.json")
    if "model_type" not in config:
        raise ModelFileError(f"{folder / 'config.json'} has no 'model_type' key, so the architecture is unknown")
    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file():
        weights = [folder / "model.safetensors"]
    elif index.is_file():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelFileError(f"{index} has no 'weight_map' naming the weight shards")
        weights = [folder / name for name in sorted(set(map(str, weight_map.values())))]
        for shard in weights:
            if not shard.is_file():
                raise ModelFileError(f"{index} lists the shard {shard.name}, which is missing from {folder}")
    elif any(folder.glob("pytorch_model*.bin")):
        return []  # pickled weights: torch reports what is wrong with them
    else:
        raise ModelFileError(
            f"model folder {folder} has no weights (looked for model.safetensors, "
            "model.safetensors.index.json, pytorch_model.bin)"
        )
    from safetensors import safe_open

    for path in weights:
        if path.stat().st_size == 0:
            raise ModelFileError(f"{path} is empty (0 bytes); copy or download the weights again")
        try:
            with safe_open(str(path), framework="pt") as handle:  # reads the header: names, shapes, extent
                handle.keys()
        except Exception as exc:  # SafetensorError: truncated, bad header
            raise ModelFileError(
                f"{path} is not a readable safetensors file, truncated or corrupt ({_cause(exc)}); "
                "copy or download it again"
            ) from exc
    return weights


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No progress bars or load reports from transformers while loading (problems become errors instead)."""
    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _from_pretrained(source: str | Path, dtype: torch.dtype, local_files_only: bool, where: str) -> PreTrainedModel:
    """AutoModelForCausalLM.from_pretrained, with missing or mis-shaped tensors an error naming `where`."""
    with _quiet_transformers():
        model, info = AutoModelForCausalLM.from_pretrained(
            source,
            dtype=dtype,
            local_files_only=local_files_only,
            output_loading_info=True,
            ignore_mismatched_sizes=True,  # reported below as an error, with the tensor's name and shapes
        )
    mismatched = sorted(info.get("mismatched_keys") or (), key=lambda m: m[0])
    if mismatched:
        name, found, expected = mismatched[0]
        raise ModelFileError(
            f"the weights in {where} do not fit its config.json: {name} has shape {list(found)}, the model expects "
            f"{list(expected)} ({len(mismatched)} tensor(s) differ)"
        )
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise ModelFileError(f"the weights in {where} lack {len(missing)} tensor(s) the model needs, e.g. {missing[0]}")
    return model


def _load_from_hub(repo_id: str, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a hub id from the local cache, or from the network only when SPECTUNE_ALLOW_HUB=1."""
    # Without network transformers retries for ~25 s per file before failing; cache-only fails in
    # milliseconds. HF_HUB_OFFLINE, if the user set it, still applies inside huggingface_hub.
    allow_network = os.environ.get(ALLOW_HUB_ENV) == "1"
    try:
        tokenizer = AutoTokenizer.from_pretrained(repo_id, local_files_only=not allow_network)
        model = _from_pretrained(repo_id, dtype, not allow_network, repr(repo_id))
    except (OSError, HFValidationError) as exc:
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if allow_network:
            reason = "could not be downloaded: the model hub could not be reached or the id is unknown"
        else:
            reason = (
                "is not in the local Hugging Face cache, and hub downloads are off "
                f"(set {ALLOW_HUB_ENV}=1 to try the hub)"
            )
        raise ModelNotFoundError(
            f"model {repo_id!r} is not a local folder and {reason}. Download it where there is network "
            f"access (e.g. `hf download {repo_id} --local-dir /path/to/folder`) and pass the local folder "
            f"path, e.g. --model /path/to/folder. Cause: {cause}"
        ) from exc
    return model, tokenizer


def load_model(name_or_path: str, *, device: str = "auto", dtype: str = "auto", forward: str = "auto") -> LoadedModel:
    """Load a model folder (or a cached hub id) and its tokenizer, in eval mode on `device` in `dtype`.

    A string that exists on disk, or looks like a path ("/x", "./x", "~/x", "a/b/c"), must be a folder with
    config.json and tokenizer files, else ModelNotFoundError naming the path; its files must be sound, else
    ModelFileError naming the broken file (nothing is printed while loading). Anything else is a hub id,
    loaded from the local Hugging Face cache only, so a missing model fails in milliseconds instead of
    after ~25 s of network retries per file; set SPECTUNE_ALLOW_HUB=1 to let it download. A hub id that
    cannot be loaded raises ModelNotFoundError naming it and suggesting a local folder. `forward` is the
    numeric path (engine/forward.py), checked here and applied when the model first runs.
    """
    check_path(forward)
    torch_device = resolve_device(device)
    folder = local_folder(name_or_path)
    torch_dtype = resolve_dtype(dtype, torch_device, _checkpoint_dtype(folder) if folder is not None else None)
    if folder is not None:
        weights = _check_folder_files(folder)
        where = ", ".join(str(w) for w in weights) or str(folder)
        # local_files_only: a local folder must never trigger a download of missing pieces.
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except Exception as exc:  # tokenizers raises plain Exceptions for files it cannot parse
            raise ModelFileError(f"cannot load the tokenizer in {folder}: {_cause(exc)}") from exc
        try:
            model = _from_pretrained(folder, torch_dtype, True, where)
        except ModelFileError:
            raise
        except Exception as exc:  # whatever transformers or torch raise for a file they cannot use
            raise ModelFileError(f"cannot load the model in {folder}: {_cause(exc)}") from exc
        path = str(folder)
    else:
        model, tokenizer = _load_from_hub(name_or_path, torch_dtype)
        path = name_or_path
    # Loaded on CPU then moved: placing weights directly on the GPU (device_map) requires accelerate.
    model = model.to(torch_device).eval()
    return LoadedModel(
        model=model, tokenizer=tokenizer, path=path, device=torch_device, dtype=torch_dtype, forward_path=forward
    )


def _first_difference(a: dict[str, int], b: dict[str, int]) -> str:
    """Describe where two vocabularies (token -> id) first differ, by ascending id."""
    by_id_a = {i: t for t, i in a.items()}
    by_id_b = {i: t for t, i in b.items()}
    for i in sorted(by_id_a.keys() | by_id_b.keys()):
        if by_id_a.get(i) != by_id_b.get(i):
            return f"first differing id {i}: {by_id_a.get(i)!r} vs {by_id_b.get(i)!r}"
    return "same ids, different tokens"  # unreachable when the dicts differ; kept for safety


def _special_tokens(tokenizer: PreTrainedTokenizerBase) -> dict[str, Any]:
    """The special tokens that change what ids mean or where generation stops (pad does neither)."""
    pad = tokenizer.pad_token
    return {
        "bos_token": tokenizer.bos_token,
        "eos_token": tokenizer.eos_token,
        "unk_token": tokenizer.unk_token,
        "special tokens": sorted(t for t in tokenizer.all_special_tokens if t != pad),
    }


def tokenizer_difference(a: LoadedModel, b: LoadedModel) -> str | None:
    """How the tokenizers of `a` and `b` differ (vocabulary, special tokens, or how they split text); None: the same.

    config.vocab_size may differ (embedding padding): only the tokenizers are compared.
    """
    return tokenizers_differ(a.tokenizer, b.tokenizer, a.path, b.path)


def tokenizers_differ(a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase, name_a: str, name_b: str) -> str | None:
    """How tokenizer `a` (of `name_a`) differs from `b` (of `name_b`), in one line; None: they tokenize the same."""
    where = f"tokenizers of {name_a} and {name_b} differ"
    vocab_a, vocab_b = a.get_vocab(), b.get_vocab()
    if vocab_a != vocab_b:
        return f"{where}: {len(vocab_a)} vs {len(vocab_b)} tokens; {_first_difference(vocab_a, vocab_b)}"
    specials_a, specials_b = _special_tokens(a), _special_tokens(b)
    for key, value in specials_a.items():
        if value != specials_b[key]:
            return f"{where}: {key} {value!r} vs {specials_b[key]!r}"
    ids_a, ids_b = a.encode(_PROBE_TEXT), b.encode(_PROBE_TEXT)
    if ids_a != ids_b:
        return f"{where}: same vocabulary but they encode text differently ({ids_a} vs {ids_b})"
    return None


def check_same_tokenizer(a: LoadedModel, b: LoadedModel) -> None:
    """Raise TokenizerMismatchError unless `a` and `b` tokenize identically; config.vocab_size may differ."""
    difference = tokenizer_difference(a, b)
    if difference is not None:
        raise TokenizerMismatchError(difference)
