"""Rebuild the bundled reference models from scratch: trajectories, tokenizer, target, draft, fidelity.

    python -m training.build [--out models/spectune-tiny] [--work runs/training] [--quick] [--stage STAGE]

Stages run in order and each skips what it already finished, so rerunning the command resumes an
interrupted build (training continues from its last checkpoint, minutes old at most). Fixed seeds;
CPU by default (a GPU is never needed). `--quick` builds toy-sized models on two instances, for CI.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from training import distill, fidelity, models, trajectories
from training.sequences import from_tensors, from_trajectory, to_tensors
from training.tokenizer import project_sources, train_tokenizer
from training.trainer import TrainConfig, batches, train

STAGES = ("trajectories", "tokenizer", "data", "target", "draft", "fidelity")
SEED = 0


@dataclass(frozen=True)
class Recipe:
    """Everything that sizes a build."""

    vocab: int  # tokenizer size
    target: models.Shape  # target model
    draft: models.Shape  # draft model
    target_epochs: int  # passes over all sequences for the target
    draft_epochs: int  # passes for the draft
    target_lr: float  # peak learning rate of the target
    draft_lr: float  # peak learning rate of the draft
    batch_tokens: int  # padded tokens per batch
    compile: bool  # torch.compile the models while training
    limit: int | None  # instances per split (None: all)
    splits: tuple[str, ...]  # suite splits to train on


FULL = Recipe(
    vocab=8192,
    target=models.TARGET,
    draft=models.DRAFT,
    target_epochs=40,
    draft_epochs=8,
    target_lr=3e-3,
    draft_lr=3e-3,
    batch_tokens=4096,
    compile=True,
    limit=None,
    splits=trajectories.SPLITS,
)
QUICK = Recipe(
    vocab=2048,
    target=models.QUICK_TARGET,
    draft=models.QUICK_DRAFT,
    target_epochs=4,
    draft_epochs=3,
    target_lr=3e-3,
    draft_lr=3e-3,
    batch_tokens=4096,
    compile=False,
    limit=1,
    splits=("dev", "test"),
)


class Build:
    """One build's folders, recipe and log."""

    def __init__(self, out: Path, work: Path, recipe: Recipe) -> None:
        self.out, self.work, self.recipe = out, work, recipe
        self.work.mkdir(parents=True, exist_ok=True)
        self.info_path = work / "build_info.json"
        self.info: dict[str, Any] = json.loads(self.info_path.read_text()) if self.info_path.is_file() else {}

    def log(self, message: str) -> None:
        """Print a timestamped line and append it to the work folder's build.log."""
        line = f"{time.strftime('%H:%M:%S')} {message}"
        print(line, flush=True)
        with (self.work / "build.log").open("a") as fh:
            fh.write(line + "\n")

    def record(self, key: str, value: Any) -> None:
        """Keep a measured value in build_info.json."""
        self.info[key] = value
        self.info_path.write_text(json.dumps(self.info, indent=1))

    def done(self, stage: str) -> bool:
        """Whether `stage` finished in an earlier run."""
        return (self.work / f"{stage}.done").is_file()

    def mark(self, stage: str) -> None:
        """Record that `stage` finished."""
        (self.work / f"{stage}.done").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))

    def tokenizer(self) -> Any:
        """The trained tokenizer."""
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.work / "tokenizer")

    def sequences(self) -> list:
        """The rendered training sequences."""
        return from_tensors(torch.load(self.work / "sequences.pt", weights_only=False))

    def run_trajectories(self) -> None:
        """Run the expert on every instance not yet cached."""
        trajectories.generate(self.work, self.recipe.splits, self.recipe.limit, log=self.log)
        rows = [r for s in self.recipe.splits for r in trajectories.finished(self.work, s).values()]
        unresolved = [r["instance_id"] for r in rows if not r["resolved"]]
        self.record("trajectories", {"instances": len(rows), "unresolved": unresolved})
        if unresolved:
            self.log(f"WARNING: {len(unresolved)} unresolved expert runs are left out of training: {unresolved}")

    def run_tokenizer(self) -> None:
        """Train the tokenizer on the project sources and the trajectories' messages."""
        texts = project_sources()
        for data in trajectories.load(self.work, self.recipe.splits):
            # "ROLE\n" opens every rendered message (after <|im_start|>), so it gets merged into one token too
            texts += [f"{m['role']}\n{m['content']}" for m in data["messages"]]
        tokenizer = train_tokenizer(texts, self.recipe.vocab, self.recipe.target.max_positions)
        tokenizer.save_pretrained(self.work / "tokenizer")
        self.log(f"tokenizer: {len(tokenizer)} tokens from {len(texts)} texts")

    def run_data(self) -> None:
        """Render every trajectory to ids and reply mask."""
        tokenizer = self.tokenizer()
        seqs = [from_trajectory(t, tokenizer) for t in trajectories.load(self.work, self.recipe.splits)]
        torch.save(to_tensors(seqs), self.work / "sequences.pt")
        lengths = [len(s.ids) for s in seqs]
        reply = [b - a for s in seqs for a, b in s.turns]
        stats = {
            "sequences": len(seqs),
            "tokens": sum(lengths),
            "tokens_per_trajectory_mean": sum(lengths) / len(seqs),
            "tokens_per_trajectory_max": max(lengths),
            "assistant_tokens": sum(sum(s.mask) for s in seqs),
            "reply_tokens_max": max(reply),
            "chars_per_token": sum(len(tokenizer.decode(s.ids)) for s in seqs) / sum(lengths),
        }
        self.record("data", stats)
        self.log(f"data: {json.dumps(stats)}")

    def _steps(self, seqs: list, epochs: int) -> int:
        return epochs * len(batches([len(s.ids) for s in seqs], self.recipe.batch_tokens))

    def run_target(self) -> None:
        """Train the target on the expert's replies and export it."""
        tokenizer, seqs = self.tokenizer(), self.sequences()
        model = models.build(self.recipe.target, tokenizer, seed=SEED)
        config = TrainConfig(
            steps=self._steps(seqs, self.recipe.target_epochs),
            batch_tokens=self.recipe.batch_tokens,
            lr=self.recipe.target_lr,
            warmup=min(50, self._steps(seqs, 1)),
            seed=SEED,
            compile=self.recipe.compile,
        )
        self.log(f"target: {models.parameters(model):,} parameters, {config.steps} steps")
        summary = train(model, seqs, config, self.work / "target.ckpt", tokenizer.pad_token_id, log=self.log)
        models.export(model, tokenizer, self.out / "target")
        self.record("target", {"parameters": models.parameters(model), "shape": asdict(self.recipe.target), **summary})

    def run_draft(self) -> None:
        """Distil the draft from the exported target and export it."""
        from transformers import AutoModelForCausalLM

        tokenizer, seqs = self.tokenizer(), self.sequences()
        labels_path = self.work / "soft_labels.pt"
        if labels_path.is_file():
            labels = torch.load(labels_path, weights_only=False)
        else:
            target = AutoModelForCausalLM.from_pretrained(self.out / "target", dtype=torch.float32)
            labels = distill.soft_labels(target, seqs, tokenizer.pad_token_id)
            torch.save(labels, labels_path)
        model = models.build(self.recipe.draft, tokenizer, seed=SEED + 1)
        config = TrainConfig(
            steps=self._steps(seqs, self.recipe.draft_epochs),
            batch_tokens=self.recipe.batch_tokens,
            lr=self.recipe.draft_lr,
            warmup=min(50, self._steps(seqs, 1)),
            seed=SEED + 1,
            compile=self.recipe.compile,
        )
        self.log(f"draft: {models.parameters(model):,} parameters, {config.steps} steps")
        summary = train(
            model,
            seqs,
            config,
            self.work / "draft.ckpt",
            tokenizer.pad_token_id,
            loss_fn=distill.distillation_loss(labels),
            log=self.log,
        )
        models.export(model, tokenizer, self.out / "draft")
        self.record("draft", {"parameters": models.parameters(model), "shape": asdict(self.recipe.draft), **summary})

    def run_fidelity(self) -> None:
        """Teacher-forced greedy check of the exported models on the dev and test trajectories."""
        from transformers import AutoModelForCausalLM

        target = AutoModelForCausalLM.from_pretrained(self.out / "target", dtype=torch.float32)
        draft = AutoModelForCausalLM.from_pretrained(self.out / "draft", dtype=torch.float32)
        seqs = [s for s in self.sequences() if s.split in ("dev", "test")]
        result = fidelity.report(target, draft, seqs)
        self.record("fidelity", result)
        for split, r in result.items():
            self.log(
                f"fidelity {split}: {r['trajectory_exact']:.1%} of {r['trajectories']} trajectories and "
                f"{r['turn_exact']:.1%} of turns reproduced exactly; draft agrees on {r['draft_agreement']:.1%} "
                "of reply tokens"
            )

    def run(self, stage: str) -> None:
        """Run one stage (timed), unless it finished before."""
        if self.done(stage):  # an unfinished training stage has no mark: it resumes from its checkpoint
            self.log(f"{stage}: done before, skipped")
            return
        t0 = time.perf_counter()
        getattr(self, f"run_{stage}")()
        self.mark(stage)
        self.log(f"{stage}: {time.perf_counter() - t0:.0f} s")


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m training.build", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("models/spectune-tiny"), help="model folders go here")
    parser.add_argument("--work", type=Path, default=Path("runs/training"), help="caches, checkpoints, logs")
    parser.add_argument("--quick", action="store_true", help="toy models on two instances (CI)")
    parser.add_argument("--stage", choices=STAGES, default=None, help="run only this stage (default: all)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the requested stages; exit 0 when they all finished."""
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    build = Build(args.out, args.work, QUICK if args.quick else FULL)
    build.record("recipe", {"quick": args.quick, **asdict(build.recipe)})
    t0 = time.perf_counter()
    for stage in [args.stage] if args.stage else STAGES:
        build.run(stage)
    build.log(f"build: {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
