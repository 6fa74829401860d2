"""Train an EAGLE-3 head for any causal-LM target on its own agent traces, frozen target, and check it.

    python -m training.eagle3 --target DIR --out DIR [--data DIR ...] [--work runs/eagle3] [--layers LO MID HI]
                              [--draft-vocab N] [--epochs N] [--depth 3] [--device auto] [--quick]
                              [--no-freeze-head] [--no-norm-before-residual]

The same trainer as training.mtp (training/mtp.py, kind `eagle3`): by default the target's own greedy
trajectories on swe-lite's train split (never dev or test), the frozen target's states cached once (here
the inputs of the three fused layers), resumable, CUDA when present. The head (engine/eagle3.py) trains with
EAGLE-3's training-time test: `--depth` chained steps, each fed the head's own previous state
(Eagle3Module.chain_logits). Its LM head and final norm are the target's own rows, kept frozen unless
--no-freeze-head, and its layer adds hidden_norm(g) as the residual (norm_before_residual) unless
--no-norm-before-residual: on the bundled pair each default gained test agreement (models/README.md, the
EAGLE-3 section, has the runs). It is written to --out in
the Hugging Face EAGLE-3 folder layout (vLLM, SGLang and `python -m serving.eagle3_gguf` load it) and
checked on dev and test: agreement with the target per chained position.
"""

from __future__ import annotations

import sys

from training.mtp import main as train_head


def main(argv: list[str] | None = None) -> int:
    """Train, save and check an EAGLE-3 head; returns the exit status."""
    return train_head(argv, kind="eagle3", doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
