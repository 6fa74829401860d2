"""A draft for the bundled target with another tokenizer, for cross-tokenizer drafting (engine/drafters/token_bridge).

    python -m training.other_tokenizer_draft [--target models/spectune-tiny/target] [--out runs/xtok-draft]
                                             [--vocab 4096] [--instances 64] [--new-tokens 192] [--steps 400]

The target replies (greedy) to the first turn of swe-lite train instances, rendered as the agent loop renders
them; a byte-level BPE of `--vocab` tokens (other merges and ids than the target's 8192) is trained on the
project sources plus those conversations, and a draft of the bundled draft's shape learns the target's replies
in the new tokenizer's ids (cross-entropy on the reply tokens). Fixed seeds, CPU, ~10 minutes on 2 cores;
written into a run folder, never into models/ (the bench and the runner take it as a path).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from agents.prompts import SYSTEM_PROMPT, instance_prompt
from engine.engine import Engine, EngineConfig
from engine.loading import load_model
from tasks.suites import load_suite
from training import models
from training.sequences import Sequence
from training.tokenizer import project_sources, train_tokenizer
from training.trainer import TrainConfig, train

SEED = 0


def conversations(target_dir: str, instances: int, new_tokens: int) -> list[tuple[str, str]]:
    """(prompt text, the target's greedy reply text) for the first turn of `instances` swe-lite train instances."""
    target = load_model(target_dir, device="cpu", dtype="float32")
    engine = Engine(target, EngineConfig(drafter="none"))
    tok = target.tokenizer
    out = []
    for instance in load_suite("swe-lite", split="train", limit=instances):
        user = instance_prompt(instance)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
        prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        reply = engine.generate(tok.encode(prompt, add_special_tokens=False), new_tokens).tokens
        out.append((prompt, tok.decode(reply, skip_special_tokens=False)))
    return out


def sequences(pairs: list[tuple[str, str]], tokenizer) -> list[Sequence]:
    """Each conversation in the new tokenizer's ids, the reply's tokens masked in for the loss."""
    seqs = []
    for i, (prompt, reply) in enumerate(pairs):
        head = tokenizer.encode(prompt, add_special_tokens=False)
        tail = tokenizer.encode(reply, add_special_tokens=False)
        ids = head + tail
        mask = [False] * len(head) + [True] * len(tail)
        seqs.append(Sequence(f"train-{i}", "train", ids, mask, [(len(head), len(ids))]))
    return seqs


def build(target: str, out: Path, vocab: int, instances: int, new_tokens: int, steps: int) -> Path:
    """Generate, fit the tokenizer, train and export the draft to `out`; returns `out`."""
    torch.manual_seed(SEED)
    start = time.monotonic()
    pairs = conversations(target, instances, new_tokens)
    print(f"{len(pairs)} target replies in {time.monotonic() - start:.0f} s", flush=True)
    tokenizer = train_tokenizer(project_sources() + [p + r for p, r in pairs], vocab, models.DRAFT.max_positions)
    seqs = sequences(pairs, tokenizer)
    model = models.build(models.DRAFT, tokenizer, seed=SEED + 1)
    config = TrainConfig(steps=steps, batch_tokens=4096, lr=3e-3, warmup=min(50, steps // 10), seed=SEED + 1)
    out.mkdir(parents=True, exist_ok=True)
    summary = train(model, seqs, config, out / "train.ckpt", tokenizer.pad_token_id)
    models.export(model, tokenizer, out)
    (out / "train.ckpt").unlink(missing_ok=True)
    print(f"draft: {models.parameters(model):,} parameters, {len(tokenizer)} tokens, {summary}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    p = argparse.ArgumentParser(prog="python -m training.other_tokenizer_draft", description=__doc__.split("\n")[0])
    p.add_argument("--target", default="models/spectune-tiny/target", help="the target folder")
    p.add_argument("--out", type=Path, default=Path("runs/xtok-draft"), help="the draft folder to write")
    p.add_argument("--vocab", type=int, default=4096, help="tokens of the draft's tokenizer (the target has 8192)")
    p.add_argument("--instances", type=int, default=64, help="swe-lite train instances the target replies to")
    p.add_argument("--new-tokens", type=int, default=192, help="tokens of each target reply")
    p.add_argument("--steps", type=int, default=400, help="optimizer steps")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    build(args.target, args.out, args.vocab, args.instances, args.new_tokens, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
