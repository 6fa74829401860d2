"""Shapes of the bundled target and draft, building them from a seed, and writing HF folders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from engine.tiny import IM_END


@dataclass(frozen=True)
class Shape:
    """A Llama model's size."""

    hidden: int  # residual width
    layers: int  # decoder blocks
    heads: int  # attention heads (head dim = hidden / heads)
    kv_heads: int  # key/value heads (grouped-query attention)
    intermediate: int  # MLP width
    max_positions: int = 4096  # context length


# Chosen from measured CPU step throughput (see models/README.md): with the line-level tokenizer a
# trajectory is ~450 tokens, so a 4-layer, 256-wide model sees every instance ~20 times in an hour.
TARGET = Shape(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=704)
DRAFT = Shape(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=192)
QUICK_TARGET = Shape(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64)
QUICK_DRAFT = Shape(hidden=16, layers=1, heads=2, kv_heads=1, intermediate=32)


def build(shape: Shape, tokenizer: Any, seed: int) -> LlamaForCausalLM:
    """A freshly initialised fp32 Llama with tied embeddings; the init depends only on `seed`."""
    vocab = max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.max_positions,
        tie_word_embeddings=True,  # the embedding is most of a small model with a large vocabulary
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):  # leave the caller's RNG alone
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.float()


def stop_ids(tokenizer: Any) -> list[int]:
    """Generation stops at end-of-turn and at end-of-text."""
    return [tokenizer.convert_tokens_to_ids(IM_END), tokenizer.eos_token_id]


def export(model: LlamaForCausalLM, tokenizer: Any, out: Path) -> Path:
    """Write `model` (fp32 safetensors), its generation config and the tokenizer to the HF folder `out`."""
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=stop_ids(tokenizer), pad_token_id=tokenizer.pad_token_id
    )
    out.mkdir(parents=True, exist_ok=True)
    model.float().save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (a tied embedding counts once)."""
    return sum(p.numel() for p in model.parameters())
