"""The pinned vLLM 0.33.0 / SGLang 0.5.23 speculative keys (export/reference/), read once."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

KEYS_FILE = Path(__file__).resolve().parent / "reference" / "speculative-config-keys.json"
VLLM_NODE = "vllm.SpeculativeConfig"
SGLANG_NODE = "sglang.arg_groups.fields.spec.Spec"


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
