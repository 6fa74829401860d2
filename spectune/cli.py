"""The `spectune` command: one name for the packages' `python -m` entry points, which all keep working.

    spectune tune hardware=rtx4060 task=swe-lite      # = python -m tuner.search hardware=rtx4060 task=swe-lite
    spectune train mtp --target T --out O             # = python -m training.mtp --target T --out O

Each subcommand (one or two words) names a module; the words after it are that module's own arguments, Hydra
overrides included, passed on untouched. `spectune` alone or `--help` prints the table. This file names modules,
it imports none of them: it stands above every floor (docs/architecture.md, Layout), and a subcommand loads only
what its module needs.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence
from typing import NamedTuple


class Command(NamedTuple):
    """A subcommand: its words, the module `python -m` runs, and one line on what it does."""

    words: tuple[str, ...]
    module: str
    summary: str


def _table(*rows: tuple[str, str, str]) -> tuple[Command, ...]:
    return tuple(Command(tuple(words.split()), module, summary) for words, module, summary in rows)


COMMANDS = _table(
    ("tune", "tuner.search", "the tuner: search, confirm and export the best configuration (Hydra overrides)"),
    ("finish", "tuner.finish", "confirm and export a study now, whatever its workers do (Hydra overrides)"),
    ("run", "runners.run", "one configuration against OFF on a suite's tasks (Hydra overrides)"),
    ("eval", "runners.eval_model", "a model's task success, decoding plainly (Hydra overrides)"),
    ("bench", "bench", "benchmarks: engine | tuner | tuner-speed | crossengine | batch | concurrency | gguf-memory"),
    ("export", "export", "how each drafter maps to each server, as Markdown rows"),
    ("export trtllm-keys", "export.reference.read_trtllm", "re-pin TensorRT-LLM's speculative keys from llm_args.py"),
    ("engine", "engine", "generate from a prompt on spectune's engine with one drafter"),
    ("engine memory", "engine.memory", "the memory model: what a target, drafter and context take"),
    ("engine tiny", "engine.tiny", "write a tiny random model folder (tests, benchmarks)"),
    ("sandbox", "tasks.sandbox", "the docker sandbox: build-image | status | tool-time | overhead"),
    ("validate", "tasks.validate", "check a suite: every gold patch resolves, every empty one does not"),
    ("build-suite", "tasks.build", "build the swe-lite suite from the bundled projects"),
    ("expert", "agents.expert", "the scripted expert through the real agent loop, sandbox and grading"),
    ("train", "training.build", "rebuild the bundled spectune-tiny models"),
    ("train mtp", "training.mtp", "train an MTP module for a target"),
    ("train eagle3", "training.eagle3", "train an EAGLE-3 head for a target"),
    ("train other-tokenizer-draft", "training.other_tokenizer_draft", "a draft with another tokenizer for a target"),
    ("gguf", "serving.gguf", "a model folder as GGUF, with llama.cpp's own converter"),
    ("gguf mtp", "serving.mtp_gguf", "a target and its MTP module as one GGUF"),
    ("gguf eagle3", "serving.eagle3_gguf", "an EAGLE-3 head as its GGUF"),
    ("gguf info", "serving.gguf_file", "what a GGUF file says about itself"),
    ("gguf memory", "serving.gguf_memory", "what llama-server allocates for a GGUF configuration"),
    ("llama install", "serving.llama_install", "build the pinned llama-server and llama-quantize into the cache"),
    ("llama caps", "serving.llama_capabilities", "what a llama-server binary can do (--spec-type kinds, flags)"),
    ("llama kinds", "tuner.server_kinds", "what a llama-server binary offers a tuner space"),
    ("ui-snapshot", "tuner.ui_snapshot", "PNGs of MLflow's pages for one study's trials"),
    ("gpu-check", "bench.gpu_check", "the GPU check for a lent machine"),
)
HELP = ("-h", "--help", "help")


def usage() -> str:
    """The table `spectune --help` prints: subcommand, module, one line each."""
    width = max(len(" ".join(c.words)) for c in COMMANDS) + 2
    module_width = max(len(c.module) for c in COMMANDS) + 2
    lines = [
        "usage: spectune SUBCOMMAND [ARGS...]   (the same as python -m MODULE [ARGS...])",
        "",
        f"{'subcommand':<{width}}{'module':<{module_width}}what",
    ]
    lines += [f"{' '.join(c.words):<{width}}{c.module:<{module_width}}{c.summary}" for c in COMMANDS]
    lines += ["", "`spectune SUBCOMMAND --help` prints that module's own options."]
    return "\n".join(lines)


def resolve(args: Sequence[str]) -> tuple[Command, list[str]]:
    """The command `args` start with (the longest match of its words) and the arguments left for its module.

    Raises LookupError with one line naming the allowed words when none matches."""
    best: Command | None = None
    for command in COMMANDS:
        n = len(command.words)
        if tuple(args[:n]) == command.words and (best is None or n > len(best.words)):
            best = command
    if best is not None:
        return best, list(args[len(best.words) :])
    first = args[0] if args else ""
    children = [c.words[1] for c in COMMANDS if len(c.words) == 2 and c.words[0] == first]
    if children:
        raise LookupError(f"spectune {first}: choose one of {', '.join(children)} (spectune --help)")
    tops = list(dict.fromkeys(c.words[0] for c in COMMANDS))
    raise LookupError(f"spectune: unknown subcommand {first!r}; choose one of {', '.join(tops)} (spectune --help)")


def forward(module: str, args: Sequence[str]) -> None:
    """Run `module` as `python -m module args...` would, in this process; sys.argv is restored afterwards."""
    saved = sys.argv[:]
    sys.argv = [module, *args]  # runpy puts the module's file in argv[0], as python -m does; Hydra reads argv[1:]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: forward to the subcommand's module; its own exits (SystemExit) pass through."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in HELP:
        print(usage())
        return 0
    try:
        command, rest = resolve(args)
    except LookupError as exc:
        print(exc, file=sys.stderr)
        return 2
    forward(command.module, rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
