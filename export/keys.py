"""The pinned vLLM 0.33.0 / SGLang 0.5.23 / TensorRT-LLM speculative keys (export/reference/), read once."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

KEYS_FILE = Path(__file__).resolve().parent / "reference" / "speculative-config-keys.json"
VLLM_NODE = "vllm.SpeculativeConfig"
SGLANG_NODE = "sglang.arg_groups.fields.spec.Spec"
TRTLLM_PREFIX = "tensorrt_llm.llmapi.llm_args."  # one node per class: export/reference/read_trtllm.py


@cache
def _fields() -> dict[str, list[list[str]]]:
    return json.loads(KEYS_FILE.read_text(encoding="utf-8"))


def vllm_keys() -> frozenset[str]:
    """Field names of vLLM's SpeculativeConfig."""
    return frozenset(name for name, _kind, _default in _fields()[VLLM_NODE])


def sglang_flags() -> frozenset[str]:
    """Command-line flags of SGLang's speculative arguments (fields marked no_cli have none)."""
    flags = set()
    for name, kind, _default in _fields()[SGLANG_NODE]:
        if "no_cli=True" in kind:  # resolved internally, not settable on the command line
            continue
        flags.add("--" + name.replace("_", "-"))
    return frozenset(flags)


def sglang_help(flag: str) -> str:
    """The annotation (type and help text) the pinned SGLang source gives `flag`."""
    name = flag.removeprefix("--").replace("-", "_")
    for field, kind, _default in _fields()[SGLANG_NODE]:
        if field == name:
            return kind
    raise KeyError(flag)


def trtllm_classes() -> tuple[str, ...]:
    """The TensorRT-LLM speculative configuration classes the pinned set records."""
    return tuple(node.removeprefix(TRTLLM_PREFIX) for node in _fields() if node.startswith(TRTLLM_PREFIX))


def trtllm_keys(cls: str) -> frozenset[str]:
    """The keys TensorRT-LLM's `cls` (e.g. NGramDecodingConfig) takes in a speculative_config section."""
    return frozenset(name for name, _kind, _default in _fields()[TRTLLM_PREFIX + cls])


def trtllm_field(cls: str, name: str) -> tuple[str, str]:
    """(annotation, default) the pinned source gives field `name` of `cls`."""
    for field, kind, default in _fields()[TRTLLM_PREFIX + cls]:
        if field == name:
            return kind, default
    raise KeyError(f"{cls}.{name}")
