"""Command line: generate from one prompt with one speculative configuration.

    python -m engine --model DIR [--draft DIR] [--drafter NAME] [--gamma N] ... --prompt TEXT

The prompt is encoded raw, as transformers' `generate` would take it (`--chat` applies the chat
template). Prints the text, or with --json one object with `text`, `tokens` and `stats`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common.errors import ConfigError
from engine.acceptance import ACCEPTANCE_RULES
from engine.drafters import DRAFTERS
from engine.eagle3 import load_eagle3
from engine.engine import Engine, EngineConfig
from engine.forward import PATHS
from engine.gamma import GAMMA_POLICIES
from engine.loading import LoadedModel, load_model
from engine.mtp import load_mtp
from engine.options import parse_option_pairs


def build_parser() -> argparse.ArgumentParser:
    """The CLI's argument parser."""
    p = argparse.ArgumentParser(prog="python -m engine", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="target model: local folder (or a cached hub id)")
    p.add_argument(
        "--draft", help="draft model folder (drafter draft_model); another tokenizer than the target's drafts as text"
    )
    p.add_argument("--mtp", help="MTP module folder (drafter mtp, mtp+ngram); python -m training.mtp trains one")
    p.add_argument("--eagle3", help="EAGLE-3 head folder (drafter eagle3, eagle3+ngram); python -m training.eagle3")
    p.add_argument(
        "--drafter", default="none", help=f"one of {sorted(DRAFTERS)}, or A+B such as mtp+ngram (default: none)"
    )
    p.add_argument("--gamma", type=int, default=4, help="draft tokens per step (default: 4)")
    p.add_argument("--gamma-policy", default="fixed", help=f"one of {list(GAMMA_POLICIES)}")
    p.add_argument("--acceptance", default="exact", help=f"one of {sorted(ACCEPTANCE_RULES)} (non-exact are lossy)")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="drafter/acceptance option, e.g. max_match=3, ngram.min_match=2, k=10 (repeatable)",
    )
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16 | float64")
    p.add_argument("--forward", default="auto", help=f"numeric path: {' | '.join(PATHS)} (engine/forward.py)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", type=Path, help="file holding the prompt text")
    p.add_argument("--chat", action="store_true", help="wrap the prompt as a user message with the chat template")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--json", action="store_true", help="print one JSON object: text, tokens, stats")
    return p


def encode_prompt(target: LoadedModel, text: str, chat: bool) -> list[int]:
    """Token ids of the prompt: raw encoding, or the chat template with a generation prompt."""
    tok = target.tokenizer
    if chat:
        if not getattr(tok, "chat_template", None):
            raise ConfigError(f"--chat: the tokenizer of {target.path} has no chat template")
        rendered = tok.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        return tok.encode(rendered, add_special_tokens=False)
    return tok.encode(text)


def run(args: argparse.Namespace) -> dict:
    """Load, generate, and return the JSON-ready result."""
    config = EngineConfig(
        drafter=args.drafter,
        gamma=args.gamma,
        gamma_policy=args.gamma_policy,
        acceptance=args.acceptance,
        options=parse_option_pairs(args.option),
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
    )
    # Validate names before loading weights, so a typo fails in milliseconds.
    Engine.validate(config)
    target = load_model(args.model, device=args.device, dtype=args.dtype, forward=args.forward)
    draft = load_model(args.draft, device=args.device, dtype=args.dtype, forward=args.forward) if args.draft else None
    mtp = load_mtp(args.mtp, target.model) if args.mtp else None
    eagle3 = load_eagle3(args.eagle3, target.model) if args.eagle3 else None
    engine = Engine(target, config, draft=draft, mtp=mtp, eagle3=eagle3)
    text = args.prompt if args.prompt is not None else args.prompt_file.read_text()
    result = engine.generate(encode_prompt(target, text, args.chat), args.max_new_tokens)
    out = result.to_dict()
    out["text"] = target.tokenizer.decode(result.tokens, skip_special_tokens=False)
    out["forward"] = target.forward.choice.describe()
    if engine.tokenizer_pair is not None:  # the draft's tokenizer differs: its drafts are carried over as text
        out["cross_tokenizer"] = engine.tokenizer_pair
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input (options, a missing or broken model file) exits 2 with a one-line message."""
    args = build_parser().parse_args(argv)
    try:
        out = run(args)
    except (ValueError, FileNotFoundError) as exc:  # ModelFileError and ModelNotFoundError included
        print(f"error: {' '.join(str(exc).split()) or type(exc).__name__}", file=sys.stderr)  # one line
        return 2
    if args.json:
        print(json.dumps({"text": out["text"], **{k: v for k, v in out.items() if k != "text"}}))
    else:
        print(out["text"])
        s = out["stats"]
        flag = " (LOSSY acceptance)" if out["lossy"] else ""
        print(
            f"[{out['drafter']}/{out['acceptance']}{flag}] {s['new_tokens']} tokens, "
            f"{s['target_forwards']} target forwards, acceptance {s['acceptance_rate']:.2f}, "
            f"mean accepted length {s['mean_accepted_length']:.2f}; forward {out['forward']}",
            file=sys.stderr,
        )
        if "cross_tokenizer" in out:
            print(f"[cross-tokenizer draft, drafts carried over as text: {out['cross_tokenizer']}]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
