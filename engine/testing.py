"""In-process fakes for tests and benchmarks: tiny random models with no files and no tokenizer.

They exercise the engine exactly as real checkpoints do (same transformers classes, same KV
cache), just small. Not for measurement of anything but the engine's own mechanics.
"""

from __future__ import annotations

import copy

import torch
from transformers import (
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from engine.loading import LoadedModel

SLIDING_WINDOW = 8  # shorter than every test prompt, so rollbacks and reuse happen past the window

# name -> (config class, model class, arch-specific config values)
ARCHS: dict[str, tuple[type, type, dict]] = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, {}),
    # every layer a sliding-window layer
    "mistral": (MistralConfig, MistralForCausalLM, {"sliding_window": SLIDING_WINDOW}),
    # Qwen2 with use_sliding_window: full layers below max_window_layers, sliding above
    "qwen2_sliding": (
        Qwen2Config,
        Qwen2ForCausalLM,
        {"use_sliding_window": True, "sliding_window": SLIDING_WINDOW, "max_window_layers": 1},
    ),
    # alternating sliding / full layers (a mixed cache), per-layer-type RoPE, q/k norms
    "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM, {"sliding_window": SLIDING_WINDOW, "sliding_window_pattern": 2}),
    # alternating sliding / full layers with logit soft-capping, eager attention (float32 softmax)
    "gemma2": (Gemma2Config, Gemma2ForCausalLM, {"sliding_window": SLIDING_WINDOW}),
    # learned absolute positions: an index past n_positions does not exist
    "gpt2": (GPT2Config, GPT2LMHeadModel, {}),
}


def random_model(
    arch: str = "llama",
    *,
    vocab: int = 96,
    hidden: int = 64,
    layers: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    logit_scale: float = 1.0,
    eos_token_id: int | None = None,
    max_positions: int = 512,
    forward: str = "auto",
) -> LoadedModel:
    """A random-init causal LM wrapped as a LoadedModel (no tokenizer).

    `logit_scale` multiplies the LM head so the next-token distribution is peaked rather than
    near-uniform (random init gives logits of std ~0.3), which sampling tests need.
    float64 by default so greedy comparisons never hinge on last-bit ties. `max_positions` is the
    context limit (`max_position_embeddings`; GPT-2's `n_positions`); `forward` the numeric path.
    """
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; allowed: {sorted(ARCHS)}")
    config_cls, model_cls, extra = ARCHS[arch]
    heads = max(2, hidden // 32)
    config = config_cls(
        **extra,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        head_dim=hidden // heads,  # Gemma's default (256) would dwarf a tiny model
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    model = model_cls(config).to(dtype).eval()
    if logit_scale != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(logit_scale)
    return LoadedModel(
        model=model,
        tokenizer=None,
        path=f"<random {arch} seed={seed}>",
        device=torch.device("cpu"),
        dtype=dtype,
        forward_path=forward,
    )


def perturbed_copy(base: LoadedModel, noise: float, seed: int = 1, vocab: int | None = None) -> LoadedModel:
    """A copy of `base` with Gaussian noise (relative std `noise`) on every weight.

    It agrees with the base model often but not always, so drafts from it see both acceptances
    and rejections. `vocab` > base vocab pads the embeddings (like Qwen2.5 7B vs 0.5B).
    """
    model = copy.deepcopy(base.model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            scale = p.detach().abs().mean() * noise
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale)
        if vocab is not None and vocab > model.config.vocab_size:
            model.resize_token_embeddings(vocab)
    return LoadedModel(
        model=model,
        tokenizer=base.tokenizer,
        path=f"{base.path}+noise{noise}",
        device=base.device,
        dtype=base.dtype,
        forward_path=base.forward_path,
    )
