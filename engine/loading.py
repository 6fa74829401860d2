"""Load a causal LM and its tokenizer for the engine, with clear errors when a model cannot be found.

Resolves device and dtype names, loads local Hugging Face folders (or hub ids already in the local cache),
and checks that a draft shares the target's tokenizer. Non-goals: downloading by default, quantisation,
multi-GPU sharding (no `device_map`: that needs `accelerate`, which is not a dependency).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.errors import HFValidationError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

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


class TokenizerMismatchError(ValueError):
    """Target and draft tokenizers differ, so draft token ids would not mean the same to the target."""


def resolve_device(device: str) -> torch.device:
    """Turn "auto", "cpu", "cuda" or "cuda:N" into a torch.device that exists on this machine."""
    name = device.strip().lower()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    match = re.fullmatch(r"cuda(?::(\d+))?", name)
    if match is None:
        raise ValueError(f"unknown device {device!r}; allowed: {', '.join(DEVICES)}")
    if not torch.cuda.is_available():
        raise ValueError(
            f"device {device!r} requested but CUDA is not available (torch {torch.__version__}); "
            "use --device cpu or --device auto"
        )
    if match.group(1) is not None and int(match.group(1)) >= torch.cuda.device_count():
        raise ValueError(
            f"device {device!r} does not exist: this machine has {torch.cuda.device_count()} GPU(s)"
        )
    return torch.device(name)


def resolve_dtype(dtype: str, device: torch.device | str) -> torch.dtype:
    """Turn a dtype name into a torch.dtype; "auto" is bfloat16 on CUDA and float32 on CPU."""
    name = dtype.strip().lower()
    if name == "auto":
        if torch.device(device).type != "cuda":
            # CPU bf16/fp16 matmuls are slow and lossy; float32 is the reference there.
            return torch.float32
        # Pre-Ampere GPUs lack fast bf16; fp16 keeps the memory saving there.
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if name not in DTYPE_ALIASES:
        raise ValueError(f"unknown dtype {dtype!r}; allowed: auto, {', '.join(DTYPE_ALIASES)}")
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


def _local_folder(name: str) -> Path | None:
    """The model folder `name` points to, None for a hub id, or ModelNotFoundError for a bad path."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelNotFoundError(
                f"model path {path} is a file; expected a model folder containing config.json"
            )
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"model folder {path} has no config.json, so it is not a model folder")
        if not any((path / f).is_file() for f in _TOKENIZER_FILES):
            raise ModelNotFoundError(
                f"model folder {path} has no tokenizer (looked for {', '.join(_TOKENIZER_FILES)})"
            )
        return path.resolve()
    if _looks_like_path(name):
        raise ModelNotFoundError(f"model folder not found: looked for {path.absolute()} (from {name!r})")
    return None


def _load_from_hub(repo_id: str, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a hub id from the local cache, or from the network only when SPECTUNE_ALLOW_HUB=1."""
    # Without network transformers retries for ~25 s per file before failing; cache-only fails in
    # milliseconds. HF_HUB_OFFLINE, if the user set it, still applies inside huggingface_hub.
    allow_network = os.environ.get(ALLOW_HUB_ENV) == "1"
    try:
        tokenizer = AutoTokenizer.from_pretrained(repo_id, local_files_only=not allow_network)
        model = AutoModelForCausalLM.from_pretrained(repo_id, dtype=dtype, local_files_only=not allow_network)
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


def load_model(name_or_path: str, *, device: str = "auto", dtype: str = "auto") -> LoadedModel:
    """Load a model folder (or a cached hub id) and its tokenizer, in eval mode on `device` in `dtype`.

    A string that exists on disk, or looks like a path ("/x", "./x", "~/x", "a/b/c"), must be a folder with
    config.json and tokenizer files, else ModelNotFoundError naming the path. Anything else is a hub id,
    loaded from the local Hugging Face cache only, so a missing model fails in milliseconds instead of
    after ~25 s of network retries per file; set SPECTUNE_ALLOW_HUB=1 to let it download. A hub id that
    cannot be loaded raises ModelNotFoundError naming it and suggesting a local folder.
    """
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    folder = _local_folder(name_or_path)
    if folder is not None:
        # local_files_only: a local folder must never trigger a download of missing pieces.
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, local_files_only=True)
        path = str(folder)
    else:
        model, tokenizer = _load_from_hub(name_or_path, torch_dtype)
        path = name_or_path
    # Loaded on CPU then moved: placing weights directly on the GPU (device_map) requires accelerate.
    model = model.to(torch_device).eval()
    return LoadedModel(model=model, tokenizer=tokenizer, path=path, device=torch_device, dtype=torch_dtype)


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


def check_same_tokenizer(a: LoadedModel, b: LoadedModel) -> None:
    """Raise TokenizerMismatchError unless `a` and `b` tokenize identically; config.vocab_size may differ."""
    where = f"tokenizers of {a.path} and {b.path} differ"
    vocab_a, vocab_b = a.tokenizer.get_vocab(), b.tokenizer.get_vocab()
    if vocab_a != vocab_b:
        sizes = f"{len(vocab_a)} vs {len(vocab_b)} tokens"
        raise TokenizerMismatchError(f"{where}: {sizes}; {_first_difference(vocab_a, vocab_b)}")
    specials_a, specials_b = _special_tokens(a.tokenizer), _special_tokens(b.tokenizer)
    for key, value in specials_a.items():
        if value != specials_b[key]:
            raise TokenizerMismatchError(f"{where}: {key} {value!r} vs {specials_b[key]!r}")
    ids_a, ids_b = a.tokenizer.encode(_PROBE_TEXT), b.tokenizer.encode(_PROBE_TEXT)
    if ids_a != ids_b:
        raise TokenizerMismatchError(
            f"{where}: same vocabulary but they encode text differently ({ids_a} vs {ids_b})"
        )
