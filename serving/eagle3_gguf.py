"""An EAGLE-3 head folder as the GGUF that llama-server drafts from with `--spec-type draft-eagle3 -md HEAD.gguf`.

    python -m serving.eagle3_gguf --target models/spectune-tiny/target --head runs/eagle3 --out head.gguf

The head is the Hugging Face EAGLE-3 folder engine/eagle3.py writes (`LlamaForCausalLMEagle3`, one decoder
layer, `draft_vocab_size`, `eagle_aux_hidden_state_layer_ids`; fc, midlayer.*, norm, lm_head, d2t offsets, t2d;
no embedding). The pinned release's own converter turns it into an `eagle3` GGUF when given the target's
folder (`--target-model-dir`): it reads the target's vocabulary size and tokenizer from there (an unknown
pre-tokenizer falls back as in serving/gguf.py), writes the layer ids as `extract_layers`, `target_hidden_size`,
norm_before_fc / norm_before_residual (off unless the config sets them), renames midlayer.* to blk.0 (q/k
permuted for llama.cpp's RoPE, hidden_norm as attn_norm_2), writes d2t as *absolute* target ids (i + d2t[i], I64,
range- and duplicate-checked) and drops t2d. The folder is checked first, so a broken one is one line naming
the file instead of a converter traceback or a server that asserts at its first draft.

What the pinned llama-server does with it (common/speculative.cpp `common_speculative_impl_draft_eagle3`,
src/models/eagle3.cpp, tools/server/server-context.cpp), for the built-in `eagle3` drafter to mirror:

- Features. Layer id L < n_layer reads the *input* of target decoder layer L (the residual stream after L
  layers, `llama_set_embeddings_layer_inp`). L == n_layer would read the last layer's output before the final
  norm (`t_h_nextn`), but only graphs with MTP layers set it: on a Llama target the server reads a buffer never
  written (no error), so `check_head` refuses that id.
  Every token the target decodes (prompt chunks and verify batches alike) gets g = fc([f_lo; f_mid; f_hi]) by
  the head's "encoder" graph (norm_before_fc off).
- The head's KV cache. The decoder entry at position P is the pair (token at P + 1, g_P), RoPE at P. A batch
  of n target tokens writes entries for its first n - 1 positions; the last one is *deferred* (its next token is
  not known yet): the next prompt chunk's first token completes it, or the seed step of the next draft does.
  A verify batch [t, d1 .. dk] writes entries for all its rows but the last (rejected rows included); after
  verification `accept(n)` moves the deferred boundary to row n (the first position not accepted), and the next
  draft removes the head's cache from there on. So, at each draft, the cache holds (x_{p+1}, fc(features_p))
  for every committed position p before the last one, built from real target features only.
- Drafting. Seed step: (the token the target just sampled, g at the deferred position) at that position. Each
  step's logits pass through d2t (draft id i -> target id, every other target id at -inf), then a top-k 10
  sampler; the draft token is the *argmax* (candidate 0), and its probability p is the softmax over those 10
  logits only (renormalised within the top 10, not over the whole vocabulary). Drafting stops before a token
  with p < `--spec-draft-p-min` (default 0.0: never; the token is not kept), or after `--spec-draft-n-max`
  tokens (default 3). Chained step j feeds (draft token j, the previous step's prenorm output) at deferred
  position + j; those chain entries are dropped from the head's cache after drafting (the server trims it to
  the target's last position). A draft shorter than `--spec-draft-n-min` (default 0) is discarded, and one
  longer than the room left (context, n_predict - 1) is truncated.
- Verification. EAGLE-3 drafts carry no draft probabilities, so the server verifies by sampling the target at
  each position and accepting while the sample equals the draft (greedy at temperature 0); rejection sampling
  (`--spec-draft-sampling probabilistic`) never applies to it.
- Precision. Both KV caches default to f16 (`-ctk/-ctv`, `-ctkd/-ctvd` f32 for exact f32 maths).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from serving.gguf import TYPES, export_gguf, read_json
from serving.gguf_cache import cache_file

ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")  # what the converter registers as EAGLE-3
WEIGHTS = "model.safetensors"
HEAD_HINT = "an EAGLE-3 head folder holds config.json and model.safetensors (python -m training.eagle3 writes one)"


def _config(folder: Path, what: str) -> dict[str, Any]:
    path = folder / "config.json"
    if not path.is_file():
        hint = HEAD_HINT if what == "head" else "a Hugging Face model folder holds config.json"
        raise FileNotFoundError(f"{path}: no such file ({hint})")
    return read_json(path)


def _tensor_shapes(path: Path) -> dict[str, list[int]]:
    """Name -> shape of every tensor in a safetensors file (its header only)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as f:
            return {name: list(f.get_slice(name).get_shape()) for name in f.keys()}
    except Exception as exc:  # safetensors raises several kinds
        raise ConfigError(f"{path}: cannot read it as safetensors ({exc})") from None


def absolute_d2t(head: str | Path) -> list[int]:
    """The head's draft vocabulary as target token ids (i + d2t[i], the HF offsets made absolute)."""
    from safetensors import safe_open

    path = Path(head) / WEIGHTS
    with safe_open(str(path), framework="np") as f:
        offsets = f.get_tensor("d2t").reshape(-1)
    return [i + int(o) for i, o in enumerate(offsets)]


def check_head(head: str | Path, target: str | Path) -> dict[str, Any]:
    """The head's config.json after checking that the folder converts and runs against `target` (module docstring).

    FileNotFoundError / ValueError in one line naming the file at fault.
    """
    head, target = Path(head), Path(target)
    c, t = _config(head, "head"), _config(target, "target")
    path = head / "config.json"
    t = {**t, **(t.get("text_config") or {})}
    if c.get("num_hidden_layers") != 1:
        raise ConfigError(f"{path}: num_hidden_layers is {c.get('num_hidden_layers')!r}; an EAGLE-3 head has exactly 1")
    arch = (c.get("architectures") or [None])[0]
    if arch not in ARCHITECTURES:
        raise ConfigError(f"{path}: architectures {c.get('architectures')!r}; expected one of {list(ARCHITECTURES)}")
    vd = c.get("draft_vocab_size")
    if not isinstance(vd, int) or vd < 1:
        raise ConfigError(f"{path}: draft_vocab_size {vd!r}; the converter needs it to recognise an EAGLE-3 head")
    missing = [k for k in ("num_hidden_layers", "hidden_size", "vocab_size") if not isinstance(t.get(k), int)]
    if missing:
        raise ConfigError(f"{target}/config.json: no {', '.join(missing)} (not a Hugging Face model config)")
    layers, ids = t["num_hidden_layers"], c.get("eagle_aux_hidden_state_layer_ids")
    if not (isinstance(ids, list) and len(ids) == 3 and all(isinstance(i, int) and 0 <= i < layers for i in ids)):
        raise ConfigError(
            f"{path}: eagle_aux_hidden_state_layer_ids {ids!r} must be three target layer ids in 0..{layers - 1} "
            f"(the inputs of those decoder layers of {target}; the last layer's output, id {layers}, is not "
            "exposed by llama.cpp's Llama graph: the pinned server would read an unwritten buffer)"
        )
    for key, want in (("vocab_size", "vocab_size"), ("hidden_size", "hidden_size")):
        if c.get(key) != t.get(want):
            raise ConfigError(
                f"{path}: {key} {c.get(key)!r} differs from the target's {t.get(want)!r} ({target}/config.json); "
                "the head uses the target's embedding table and vocabulary"
            )
    if c.get("target_hidden_size", t["hidden_size"]) != t["hidden_size"]:
        raise ConfigError(f"{path}: target_hidden_size {c['target_hidden_size']} is not {target}'s {t['hidden_size']}")
    weights = head / WEIGHTS
    if not weights.is_file():
        raise FileNotFoundError(f"{weights}: no such file ({HEAD_HINT})")
    shapes = _tensor_shapes(weights)
    for name in ("fc.weight", "lm_head.weight", "norm.weight", "midlayer.hidden_norm.weight"):
        if name not in shapes:
            raise ConfigError(f"{weights}: no tensor {name!r} (not an EAGLE-3 head's weights)")
    if shapes["lm_head.weight"][0] != vd:
        raise ConfigError(f"{weights}: lm_head.weight has {shapes['lm_head.weight'][0]} rows, draft_vocab_size is {vd}")
    if "d2t" in shapes:
        if shapes["d2t"] != [vd]:
            raise ConfigError(f"{weights}: d2t has shape {shapes['d2t']}, expected [{vd}] (draft_vocab_size)")
        ids_t = absolute_d2t(head)
        bad = [i for i in ids_t if not 0 <= i < t["vocab_size"]]
        if bad or len(set(ids_t)) != len(ids_t):
            why = f"target ids out of 0..{t['vocab_size'] - 1} ({bad[:3]})" if bad else "repeated target ids"
            raise ConfigError(f"{weights}: d2t (offsets: target id = i + d2t[i]) gives {why}")
    elif vd != t["vocab_size"]:
        raise ConfigError(f"{weights}: no d2t, yet draft_vocab_size {vd} is not the target's {t['vocab_size']}")
    return c


def eagle3_gguf(head: str | Path, target: str | Path, out: str | Path, kind: str = "f32") -> Path:
    """Convert the EAGLE-3 head folder `head` (trained on `target`) to a GGUF at `out`; returns it."""
    if kind not in TYPES:
        raise ConfigError(f"unknown GGUF type {kind!r}; allowed: {list(TYPES)}")
    head, target = Path(head).resolve(), Path(target).resolve()
    check_head(head, target)
    return export_gguf(head, out, kind, extra_args=["--target-model-dir", str(target)])


def cached_eagle3_gguf(target_path: str | Path, head_path: str | Path, kind: str = "f32") -> Path:
    """eagle3_gguf once per (target, head, type), kept in the GGUF cache (serving.gguf_cache.cache_file keys both
    folders' files: an edited head or target is converted again)."""
    if kind not in TYPES:
        raise ConfigError(f"unknown GGUF type {kind!r}; allowed: {list(TYPES)}")
    check_head(head_path, target_path)  # a broken folder fails the same way whether or not a file is cached
    out = cache_file("eagle3", [target_path, head_path], kind)
    return out if out.is_file() else eagle3_gguf(head_path, target_path, out, kind)


def main(argv: list[str] | None = None) -> int:
    """Command line; prints the written file."""
    parser = argparse.ArgumentParser(prog="python -m serving.eagle3_gguf", description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="the target's Hugging Face folder the head was trained on")
    parser.add_argument("--head", required=True, help="the EAGLE-3 head folder (python -m training.eagle3 writes one)")
    parser.add_argument("--out", required=True, help="the .gguf file to write")
    parser.add_argument("--type", default="f32", choices=TYPES, help="weight type (default f32: exact streams)")
    args = parser.parse_args(argv)
    try:
        print(eagle3_gguf(args.head, args.target, args.out, args.type))
    except (FileNotFoundError, ValueError, RuntimeError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
