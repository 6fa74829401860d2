"""`python -m engine.memory`: the memory model's estimate for a model (and a draft) from their config.json files.

    python -m engine.memory --model DIR_OR_ID [--draft DIR] --dtype bfloat16 --context 8192 --gamma 4 --ceiling-gib 8

Prints the estimate's parts and, with --ceiling-gib, the largest context that fits; bad input is one line, exit 2.
"""

from __future__ import annotations

import argparse
import sys

from common.units import GIB
from engine import memory
from engine.memory import DTYPE_BYTES, PARTS, context_cap, estimate_memory, largest_context, model_shape


def main(argv: list[str] | None = None) -> int:
    """`python -m engine.memory --model DIR [--draft DIR] --dtype bfloat16 --context 8192 --gamma 4 --ceiling-gib 8`."""
    parser = argparse.ArgumentParser(prog="python -m engine.memory", description=memory.__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="target model folder or cached hub id")
    parser.add_argument("--draft", help="draft model folder or cached hub id")
    parser.add_argument("--dtype", default="bfloat16", help=f"weight dtype ({', '.join(DTYPE_BYTES)})")
    parser.add_argument("--draft-dtype", help="draft weight dtype (default: --dtype)")
    parser.add_argument("--kv-dtype", help="KV cache dtype (default: the weight dtype)")
    parser.add_argument("--context", type=int, default=4096, help="tokens held in the KV cache")
    parser.add_argument("--gamma", type=int, default=0, help="draft tokens per step (0: plain decoding)")
    parser.add_argument("--prefill", type=int, default=0, help="tokens of the longest single prefill forward")
    parser.add_argument("--drafter-gib", type=float, default=0.0, help="other drafter weights (MTP heads), GiB")
    parser.add_argument("--overhead-gib", type=float, default=0.0, help="fixed runtime overhead, GiB")
    parser.add_argument("--ceiling-gib", type=float, help="memory ceiling: also print the largest context that fits")
    parser.add_argument("--sessions", type=int, default=1, help="sessions served at once, each with its own KV")
    args = parser.parse_args(argv)
    try:
        target = model_shape(args.model)
        draft = model_shape(args.draft) if args.draft else None
        kwargs = dict(
            dtype=args.dtype,
            gamma=args.gamma,
            draft=draft,
            draft_dtype=args.draft_dtype,
            kv_dtype=args.kv_dtype,
            drafter_weight_bytes=int(args.drafter_gib * GIB),
            overhead_bytes=int(args.overhead_gib * GIB),
            prefill_tokens=args.prefill,
            sessions=args.sessions,
        )
        estimate = estimate_memory(target, context=args.context, **kwargs)
        best = largest_context(target, int(args.ceiling_gib * GIB), **kwargs) if args.ceiling_gib is not None else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(estimate.describe())
    for name, value in estimate.as_dict().items():
        if name in (*PARTS, "total"):
            print(f"  {name:<16} {value:>16,d} B  {value / GIB:8.3f} GiB")
    cap = context_cap(target, draft)
    if cap is not None and args.context > cap:
        print(f"note: context {args.context} exceeds the models' position limit of {cap} tokens")
    if best is not None:
        capped = " (the models' position limit)" if best == cap else ""
        each = "" if args.sessions == 1 else f" per session ({args.sessions} sessions at once)"
        print(f"largest context under {args.ceiling_gib:g} GiB: {best} tokens{each}{capped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
