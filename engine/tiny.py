"""Tiny random-init causal LMs (Llama or Qwen2) with a byte-level BPE tokenizer, for tests and benchmarks.

Writes a Hugging Face model folder that the engine loads like a real checkpoint, fully offline and
deterministically. Non-goals: useful text (weights are random) or matching any real model's tokenizer.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from common.errors import ConfigError

EOS_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (EOS_TOKEN, IM_START, IM_END)

# ChatML, like Qwen's instruct models, so prompts built for a real target also render on a tiny one.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

ARCHS: dict[str, tuple[type, type[PreTrainedModel]]] = {
    "llama": (LlamaConfig, LlamaForCausalLM),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
}
DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float64": torch.float64}
DEFAULT_VOCAB = 512

# Stdlib modules whose source is the tokenizer's training text: code-heavy like an agent's traffic, present
# in every CPython install, and fixed for a given Python version (so training is reproducible offline).
_CORPUS_MODULES = (
    "textwrap",
    "json.decoder",
    "json.encoder",
    "string",
    "difflib",
    "shlex",
    "fnmatch",
    "heapq",
    "bisect",
    "calendar",
)
_CORPUS_SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Fix the failing test and run the whole suite again before you commit.",
    "Speculative decoding lets a cheap draft propose tokens that the target model verifies in one pass.",
    "Read the error message, open the file it names, and change only what is needed.",
    "I will list the files in the repository, then edit the function that parses the arguments.",
)


def _corpus() -> list[str]:
    """The fixed training texts: stdlib sources (those whose source is available) plus English sentences."""
    texts: list[str] = []
    for name in _CORPUS_MODULES:
        try:
            texts.append(inspect.getsource(importlib.import_module(name)))
        except (ImportError, OSError, TypeError):
            # A stripped Python install (no .py sources) still yields a usable, if smaller, tokenizer.
            continue
    texts.extend(_CORPUS_SENTENCES)
    return texts


def fit_byte_bpe(
    pre_tokenizer: Any, texts: Iterable[str], vocab: int, model_max_length: int | None = None
) -> PreTrainedTokenizerFast:
    """A deterministic byte-level BPE of at most `vocab` tokens over `texts` cut by `pre_tokenizer`, ChatML specials."""
    minimum = 256 + len(SPECIAL_TOKENS)  # every byte plus the special tokens
    if vocab < minimum:
        raise ConfigError(f"vocab must be at least {minimum} (256 bytes + {len(SPECIAL_TOKENS)} special tokens)")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),  # listed first, so they get ids 0, 1, 2
        # The full byte alphabet guarantees any input encodes, whatever the corpus happened to contain.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(texts), trainer=trainer)
    # Like GPT-2 and Qwen, one token serves as bos, eos and pad; nothing is prepended when encoding.
    limit = {} if model_max_length is None else {"model_max_length": model_max_length}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=EOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        additional_special_tokens=[IM_START, IM_END],
        **limit,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def train_tokenizer(vocab: int) -> PreTrainedTokenizerFast:
    """Train a deterministic byte-level BPE tokenizer of at most `vocab` tokens with ChatML special tokens."""
    return fit_byte_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), _corpus(), vocab)


def _kv_heads(heads: int) -> int:
    """Largest divisor of `heads` that is at most heads // 2, so grouped-query attention is exercised."""
    if heads < 2:
        return 1
    return max(d for d in range(1, heads // 2 + 1) if heads % d == 0)


def _required_vocab(tokenizer: PreTrainedTokenizerBase) -> int:
    """Embedding rows the tokenizer needs: its size, or its largest id + 1 if ids have gaps."""
    ids = tokenizer.get_vocab().values()
    return max(len(tokenizer), max(ids, default=-1) + 1)


def _generation_eos(tokenizer: PreTrainedTokenizerBase, tokenizer_from: Path | None) -> list[int] | int | None:
    """Stop tokens for generation_config: the source model's if copied, else eos plus <|im_end|>."""
    if tokenizer_from is not None and (tokenizer_from / "generation_config.json").is_file():
        # A draft must stop where its target stops, so it inherits the target's list as-is.
        return GenerationConfig.from_pretrained(tokenizer_from).eos_token_id
    eos: list[int] = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
    im_end = tokenizer.get_vocab().get(IM_END)
    # Chat models stop at end-of-turn too (Qwen2.5-Instruct lists both); this also gives tests a list-valued
    # eos_token_id to handle, as real checkpoints have.
    if im_end is not None and im_end not in eos:
        eos.append(im_end)
    return eos or None


def make_tiny_model(
    out_dir: str | Path,
    *,
    arch: str = "llama",
    layers: int = 4,
    hidden: int = 256,
    vocab: int | None = None,
    seed: int = 0,
    tokenizer_from: str | Path | None = None,
    heads: int | None = None,
    max_positions: int = 4096,
    dtype: str = "float32",
) -> Path:
    """Write a random-init model and tokenizer to `out_dir` (vocab: 512, or the copied tokenizer's size)."""
    if arch not in ARCHS:
        raise ConfigError(f"unknown arch {arch!r}; allowed: {', '.join(ARCHS)}")
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPES)}")
    if layers < 1 or hidden < 1 or max_positions < 1:
        raise ConfigError("layers, hidden and max_positions must be positive")
    n_heads = heads if heads is not None else max(1, hidden // 64)
    if n_heads < 1 or hidden % n_heads:
        raise ConfigError(f"hidden ({hidden}) must be a positive multiple of heads ({n_heads})")
    if (hidden // n_heads) % 2:
        raise ConfigError(f"head dim hidden/heads = {hidden // n_heads} must be even for rotary embeddings")

    source = Path(tokenizer_from).expanduser() if tokenizer_from is not None else None
    if source is not None:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
        needed = _required_vocab(tokenizer)
        if vocab is not None and vocab < needed:
            raise ConfigError(f"--vocab {vocab} is smaller than the tokenizer from {source} ({needed} tokens)")
        model_vocab = vocab if vocab is not None else needed
    else:
        # Training asks BPE for exactly model_vocab tokens; a small corpus may stop short, and the rows
        # past the tokenizer are then padding, as in real checkpoints whose embedding is rounded up.
        model_vocab = vocab if vocab is not None else DEFAULT_VOCAB
        tokenizer = train_tokenizer(model_vocab)
        tokenizer.model_max_length = max_positions

    config_cls, model_cls = ARCHS[arch]
    extra = {"max_window_layers": layers} if arch == "qwen2" else {}
    config = config_cls(
        vocab_size=model_vocab,
        hidden_size=hidden,
        intermediate_size=max(32, 32 * round(2.75 * hidden / 32)),
        num_hidden_layers=layers,
        num_attention_heads=n_heads,
        num_key_value_heads=_kv_heads(n_heads),
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **extra,
    )
    # fork_rng keeps the caller's global RNG state untouched while making init a pure function of the seed.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model = model.to(DTYPES[dtype]).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=_generation_eos(tokenizer, source),
        pad_token_id=tokenizer.pad_token_id,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def parameter_count(model_dir: str | Path) -> int:
    """Number of parameters stored in a model folder's safetensors files (read from headers only)."""
    total = 0
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for key in handle.keys():
                total += math.prod(handle.get_slice(key).get_shape())
    return total


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: parse arguments, write the model, print one summary line."""
    parser = argparse.ArgumentParser(prog="python -m engine.tiny", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="folder to write the model and tokenizer into")
    parser.add_argument("--arch", choices=sorted(ARCHS), default="llama")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument(
        "--vocab",
        type=int,
        default=None,
        help=f"model vocab size (default {DEFAULT_VOCAB}, or the copied size)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer-from", type=Path, default=None, help="copy this model folder's tokenizer")
    parser.add_argument("--heads", type=int, default=None, help="attention heads (default hidden // 64)")
    parser.add_argument("--max-positions", type=int, default=4096)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    args = parser.parse_args(argv)
    try:
        out = make_tiny_model(
            args.out_dir,
            arch=args.arch,
            layers=args.layers,
            hidden=args.hidden,
            vocab=args.vocab,
            seed=args.seed,
            tokenizer_from=args.tokenizer_from,
            heads=args.heads,
            max_positions=args.max_positions,
            dtype=args.dtype,
        )
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    print(f"wrote {args.arch} model ({parameter_count(out):,} parameters, {args.dtype}) and tokenizer to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
