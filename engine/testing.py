"""In-process fakes for tests and benchmarks: tiny random models with no files, and small in-process tokenizers.

They exercise the engine exactly as real checkpoints do (same transformers classes, same KV
cache), just small. Not for measurement of anything but the engine's own mechanics.
"""

from __future__ import annotations

import copy
from functools import cache

import torch
from tokenizers import Tokenizer, decoders, models, trainers
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
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from engine.loading import LoadedModel
from engine.tiny import IM_END, IM_START, SPECIAL_TOKENS, _corpus

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


# Lower-case text, spaces, newlines and a little punctuation: a character-level BPE over it fits a 96-id model.
TEXT_ALPHABET = "abcdefghijklmnopqrstuvwxyz (),.:=\n"


@cache
def text_tokenizer(vocab: int, alphabet: str = TEXT_ALPHABET) -> PreTrainedTokenizerFast:
    """A character-level BPE of exactly `vocab` ids over `alphabet`, ChatML specials first (ids 0-2), no EOS.

    Trained in-process on engine.tiny's corpus restricted to `alphabet`: two sizes share their first merges and
    split text differently after them. No EOS token, so a random model given one stops where it did without.
    """
    texts = ["".join(c for c in text.lower() if c in alphabet) for text in _corpus()]
    backend = Tokenizer(models.BPE())
    backend.decoder = decoders.Fuse()  # pieces are plain text: decoding concatenates them
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=list(alphabet),
        limit_alphabet=len(alphabet),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, additional_special_tokens=[IM_START, IM_END])
    if len(tokenizer) != vocab:
        raise ValueError(f"the corpus gives {len(tokenizer)} tokens over {alphabet!r}, not {vocab}")
    return tokenizer


def with_tokenizer(base: LoadedModel, tokenizer: PreTrainedTokenizerFast, name: str = "") -> LoadedModel:
    """`base` (the same weights and forward) with `tokenizer`."""
    model = LoadedModel(
        model=base.model,
        tokenizer=tokenizer,
        path=f"{base.path}+{name or 'tokenizer'}",
        device=base.device,
        dtype=base.dtype,
        forward_path=base.forward_path,
    )
    model._forward = base._forward  # shared: a forward built for `base` (a custom plan) serves this view too
    return model
