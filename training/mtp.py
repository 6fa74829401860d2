"""Train an MTP module (or, as kind `eagle3`, an EAGLE-3 head: training/eagle3.py) for any causal-LM target on
agent traces, frozen target, and check it teacher-forced.

    python -m training.mtp --target DIR --out DIR [--data DIR ...] [--work runs/mtp] [--draft-vocab N]
                           [--epochs N] [--depth 3] [--device auto] [--quick]

Data (training/mtp_data.py): by default the target's own trajectories on swe-lite's train split (the
target decodes greedily through the real agent loop), never dev or test; `--data` takes folders of
agent-loop trajectory JSONs instead. The frozen target's trunk outputs and greedy next tokens are
cached once; only the module trains (training/trainer.py's resumable loop: rerunning the command
resumes from its checkpoint), on the reply positions (the only ones drafting ever happens at), chained
`--depth` steps teacher-forced (MtpModule.chain_logits). The module is written to --out (config.json +
model.safetensors, with the target's fingerprint and this run's figures) and checked on dev and test:
the share of reply tokens where the chained proposal j equals the target's own token (j = 1: the
next-but-one token; a proposal at j counts only where steps < j were right, as in greedy drafting).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from engine.eagle3 import Eagle3Config, Eagle3Module, save_eagle3
from engine.heads import ChainedHead
from engine.llama import TRUNK
from engine.loading import load_model
from engine.mtp import MtpConfig, MtpModule, save_mtp
from training.mtp_data import Cached, cache_split, load_trajectories, target_trajectories
from training.trainer import TrainConfig, batches, pad, train

EVAL_SPLITS = ("dev", "test")


@dataclass(frozen=True)
class HeadKind:
    """What differs between the heads this trainer makes: how one is built for a target, its taps, how it is saved."""

    name: str  # the drafter it serves; also names the work files
    build: Callable[[torch.nn.Module, list[int], argparse.Namespace], ChainedHead]  # (target, draft vocab, args)
    save: Callable[[Any, Path], Path]
    taps: Callable[[torch.nn.Module, argparse.Namespace], tuple[int, ...]]  # the target states it reads


def _build_mtp(model: torch.nn.Module, vocab: list[int], args: argparse.Namespace) -> MtpModule:
    module = MtpModule(MtpConfig.for_target(model, draft_vocab_size=len(vocab)))
    if vocab:
        module.d2t.copy_(torch.tensor(vocab))
    return module


def _build_eagle3(model: torch.nn.Module, vocab: list[int], args: argparse.Namespace) -> Eagle3Module:
    """A head for `model`; its LM head and final norm start as the target's own (rows of the draft vocabulary)."""
    config = Eagle3Config.for_target(
        model, args.layers, draft_vocab_size=len(vocab), norm_before_residual=args.norm_before_residual
    )
    module = Eagle3Module(config)
    with torch.no_grad():
        if vocab:
            module.d2t.copy_(torch.tensor(vocab))
        head = model.get_output_embeddings().weight.detach().float()
        module.lm_head.weight.copy_(head[module.d2t] if vocab else head)
        norm = getattr(getattr(model, "model", None), "norm", None)
        if norm is not None and getattr(norm, "weight", None) is not None:
            module.norm.weight.copy_(norm.weight.detach().float())
    if args.freeze_head:  # the target's own rows stay as they are: the layer learns to feed them
        module.lm_head.requires_grad_(False)
        module.norm.requires_grad_(False)
    return module


KINDS = {
    "mtp": HeadKind("mtp", _build_mtp, save_mtp, lambda model, args: (TRUNK,)),
    "eagle3": HeadKind(
        "eagle3",
        _build_eagle3,
        save_eagle3,
        lambda model, args: tuple(Eagle3Config.for_target(model, args.layers).layer_ids),
    ),
}


def choose_draft_vocab(train: Cached, size: int, vocab: int) -> list[int]:
    """The `size` tokens the target says most often at reply positions of the training data.

    Ties go to the lower id; when replies use fewer distinct tokens, the rest are the most frequent
    tokens of the whole sequences, then the lowest ids (a fixed size keeps the head's cost predictable).
    """
    said: Counter[int] = Counter()
    seen: Counter[int] = Counter()
    for seq, labels in zip(train.sequences, train.labels, strict=True):
        mask = torch.tensor(seq.mask)
        said.update(labels[:-1][mask[1:]].tolist())  # the target's token at each reply position
        seen.update(seq.ids)
    ranked = sorted(said, key=lambda t: (-said[t], t))
    ranked += [t for t in sorted(seen, key=lambda t: (-seen[t], t)) if t not in said]
    chosen = set(ranked[:size])
    ranked += [t for t in range(vocab) if t not in chosen][: max(0, size - len(chosen))]
    return sorted(ranked[: min(size, vocab)])


def _padded(data: Cached, indices: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    h = data.hidden[indices[0]].shape[1]
    hidden = torch.zeros((len(indices), width, h))
    labels = torch.zeros((len(indices), width), dtype=torch.long)
    for row, i in enumerate(indices):
        n = data.hidden[i].shape[0]
        hidden[row, :n] = data.hidden[i]
        labels[row, :n] = data.labels[i]
    return hidden, labels


def chain_targets(labels: torch.Tensor, mask: torch.Tensor, depth: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per chained step j: (the target's token at each start t, whether x_{t+1+j} is a reply token), [B, T-1-j]."""
    T = labels.shape[1]
    return [(labels[:, j : T - 1], mask[:, j + 1 :]) for j in range(1, depth + 1)]


def make_loss(data: Cached, depth: int, t2d: torch.Tensor, device: torch.device):
    """The trainer's loss: mean cross-entropy of every chained step at the reply positions (draft vocabulary)."""

    def loss_fn(module: MtpModule, indices: list[int], ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden, labels = _padded(data, indices, ids.shape[1])
        hidden, labels, ids, mask = (x.to(device) for x in (hidden, labels, ids, mask))
        total, count = 0.0, 0
        for logits, (want, where) in zip(
            module.chain_logits(hidden, ids, depth, rows=[where for _, where in chain_targets(labels, mask, depth)]),
            chain_targets(labels, mask, depth),
            strict=True,
        ):
            target = t2d[want[where]]  # -1: outside the draft vocabulary, no loss (it cannot be proposed)
            total = total + F.cross_entropy(logits, target, ignore_index=-1, reduction="sum")
            count += int((target >= 0).sum())
        return total / max(count, 1)

    return loss_fn


@torch.no_grad()
def agreement(module: MtpModule, data: Cached, depth: int, device: torch.device) -> dict[str, Any]:
    """Teacher-forced agreement with the target on reply tokens, per chained position (module docstring)."""
    module.eval()
    hits = [0] * depth  # proposal j right and every earlier one right
    alone = [0] * depth  # proposal j right (teacher-forced inputs), whatever came before
    total = [0] * depth
    for i, seq in enumerate(data.sequences):
        ids = torch.tensor([seq.ids], device=device)
        mask = torch.tensor([seq.mask], device=device)
        labels = data.labels[i][None].to(device)
        hidden = data.hidden[i][None].to(device)
        outs = module.chain_logits(hidden, ids, depth)
        T = ids.shape[1]
        chained = torch.ones(T - 1 - depth, dtype=torch.bool, device=device)
        for j, (logits, (want, where)) in enumerate(zip(outs, chain_targets(labels, mask, depth), strict=True)):
            right = module.to_target_ids(logits[0].argmax(-1)) == want[0]  # [T-1-(j+1)]
            n = T - 1 - depth  # starts every step has, so the chained columns line up
            where, right = where[0, :n], right[:n]
            chained &= right
            alone[j] += int((right & where).sum())
            hits[j] += int((chained & where).sum())
            total[j] += int(where.sum())
    return {
        "reply_tokens": total[0],
        "position": [hits[j] / total[j] if total[j] else 0.0 for j in range(depth)],
        "position_teacher_forced": [alone[j] / total[j] if total[j] else 0.0 for j in range(depth)],
    }


def _args(argv: list[str] | None, kind: str = "mtp", doc: str | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m training.{kind}", description=(doc or __doc__).split("\n\n")[0])
    p.add_argument("--target", required=True, help="the target model folder (any AutoModelForCausalLM)")
    p.add_argument("--out", required=True, help=f"where to write the {kind} head (config.json + model.safetensors)")
    p.add_argument("--data", nargs="*", help="folders of agent trajectories to train on (default: the target's own)")
    p.add_argument("--work", default=f"runs/{kind}", help="trajectories, cached target states, checkpoint (resumable)")
    if kind == "eagle3":
        p.add_argument(
            "--layers",
            type=int,
            nargs=3,
            default=None,
            metavar=("LOW", "MID", "HIGH"),
            help="target layers whose inputs are fused (default: EAGLE-3's 2, n/2, n-3; 1, n/2, n-1 below 8 layers)",
        )
        p.add_argument(
            "--freeze-head",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="keep the LM head and final norm as the target's own (default on: on the bundled pair +4 points "
            "of test agreement at position 1 over training them, which over-fits the train split)",
        )
        p.add_argument(
            "--norm-before-residual",
            action=argparse.BooleanOptionalAction,
            default=True,
            help="the layer's residual is hidden_norm(g), not g (default on: on the bundled pair +18 points of test "
            "agreement at position 1; vLLM and llama-server run it, SGLang 0.5.23 does not)",
        )
    p.add_argument(
        "--draft-vocab",
        type=int,
        default=0,
        help="rows of the head's draft vocabulary (the tokens the target says most at train replies); 0 = all"
        " (the default: on the bundled pair 1024 / 2048 rows cover only 73 / 86%% of test reply tokens)",
    )
    p.add_argument("--epochs", type=float, default=8.0, help="passes over the training sequences")
    p.add_argument("--depth", type=int, default=3, help="chained steps trained (and checked)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    p.add_argument("--weight-decay", type=float, default=0.05, help="AdamW weight decay (against over-fitting)")
    p.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per batch")
    p.add_argument("--device", default="auto", help="auto (CUDA when present) | cpu | cuda")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0, help="initialisation and batch order")
    p.add_argument("--quick", action="store_true", help="two instances per split and a few steps (CI)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None, kind: str = "mtp", doc: str | None = None) -> int:
    """Train, save and check a head of `kind` (KINDS); returns the exit status."""
    head_kind = KINDS[kind]
    args = _args(argv, kind, doc)
    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    limit = 2 if args.quick else None
    device = torch.device(
        "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device.replace("auto", "cpu")
    )
    t0 = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - t0:6.0f} s] {message}", flush=True)

    target = load_model(args.target, device=str(device), dtype="float32", forward="transformers")
    model = target.model.requires_grad_(False)
    taps = head_kind.taps(model, args)
    data: dict[str, Cached] = {}
    for split in ("train", *EVAL_SPLITS):  # dev and test: always the target's own, for the check
        if split == "train" and args.data:
            trajectories = [t for f in args.data for t in load_trajectories(Path(f))]
        else:
            trajectories = load_trajectories(target_trajectories(args.target, split, work, limit, log))
        data[split] = cache_split(
            model,
            target.tokenizer,
            trajectories,
            work / f"states-{split}{'-quick' if args.quick else ''}.pt",
            log,
            taps,
        )
        tokens = sum(len(s.ids) for s in data[split].sequences)
        log(f"{split}: {len(data[split].sequences)} sequences, {tokens} tokens")

    full = int(model.config.get_text_config(decoder=True).vocab_size)
    vocab = choose_draft_vocab(data["train"], args.draft_vocab, full) if 0 < args.draft_vocab < full else []
    torch.manual_seed(args.seed)
    module = head_kind.build(model, vocab, args).to(device).bind(model)
    config = module.config
    t2d = torch.full((config.vocab_size,), -1, dtype=torch.long, device=device)
    if vocab:
        t2d[module.d2t] = torch.arange(len(vocab), device=device)
    else:
        t2d = torch.arange(config.vocab_size, device=device)

    groups = len(batches([len(s.ids) for s in data["train"].sequences], args.batch_tokens))
    steps = max(1, math.ceil((8 if args.quick else args.epochs) * groups))
    train_config = TrainConfig(
        steps=steps,
        batch_tokens=args.batch_tokens,
        lr=args.lr,
        weight_decay=args.weight_decay,
        warmup=min(50, steps // 10),
        seed=args.seed,
        log_every=max(1, min(20, steps // 20)),
    )
    trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
    log(f"training {trainable} of {sum(p.numel() for p in module.parameters())} parameters, {steps} steps on {device}")
    pad_id = int(target.tokenizer.pad_token_id or 0)
    loss_fn = make_loss(data["train"], args.depth, t2d, device)
    with torch.no_grad():  # the untrained module's loss on the first batch, for the record
        first = data["train"].sequences[: max(1, min(4, len(data["train"].sequences)))]
        ids, mask = pad(first, list(range(len(first))), pad_id)
        initial_loss = float(loss_fn(module, list(range(len(first))), ids, mask))
    summary = train(
        module,
        data["train"].sequences,
        train_config,
        work / f"{kind}-checkpoint.pt",
        pad_id,
        loss_fn=loss_fn,
        log=log,
    )
    # The held-out splits always; the training split too in --quick (a check that training fit at all).
    checks = {s: agreement(module, data[s], args.depth, device) for s in data if s != "train" or args.quick}
    coverage = None
    if vocab and "test" in data:
        chosen = set(vocab)
        said = [
            int(y)
            for s, y in zip(data["test"].sequences, data["test"].labels, strict=True)
            for y, m in zip(y[:-1].tolist(), s.mask[1:], strict=True)
            if m
        ]
        coverage = sum(t in chosen for t in said) / max(1, len(said))
    module.config.trained = {
        "command": f"python -m training.{kind} " + " ".join(sys.argv[1:] if argv is None else argv),
        "data": "--data " + " ".join(args.data) if args.data else "the target's own trajectories, swe-lite train",
        "train_sequences": len(data["train"].sequences),
        "steps": summary["steps"],
        "initial_loss": initial_loss,
        "final_loss": summary["loss"],
        "seconds": round(time.perf_counter() - t0, 1),
        "depth": args.depth,
        "draft_vocab_coverage_test": coverage,
        "agreement": checks,
    }
    head_kind.save(module.to("cpu"), Path(args.out))
    for split, check in checks.items():
        cells = ", ".join(f"{j + 1}: {v:.1%}" for j, v in enumerate(check["position"]))
        forced = ", ".join(f"{j + 1}: {v:.1%}" for j, v in enumerate(check["position_teacher_forced"]))
        log(f"agreement on {split} ({check['reply_tokens']} reply tokens): chained {cells} | each alone {forced}")
    if coverage is not None:
        log(f"draft vocabulary: {len(vocab)} tokens cover {coverage:.2%} of the target's test reply tokens")
    log(f"wrote {args.out}")
    print(json.dumps(module.config.trained["agreement"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
