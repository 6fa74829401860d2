"""Benchmarks: `python -m bench <benchmark> ...`.

`engine`: spectune's decode loop (plain, ngram, draft_model, suffix) against transformers `generate` (greedy,
prompt lookup, assisted generation) on the same weights and prompts, CPU. Prints a rich table, or one JSON
object with --json (progress goes to stderr, so stdout holds nothing but the JSON).

`crossengine`: the same agent conversations through spectune's engine and a real llama-server (identical
streams, acceptance side by side, tokens/s of both, the server's speed predicted from spectune's acceptance
and a server cost profile beside what it measured); bench/crossengine.py.

`batch`: the engine's aggregate decode tokens/s with N sessions verified together in one forward per step.

`concurrency`: the seeds' load test: correct tasks per minute with one agent and with N at once, OFF and ON,
on spectune's engine and llama-server, and where speculation stops paying; bench/concurrency.py.

`tuner`: the tuner's search quality, apart from measurement noise. An exhaustive grid over a small space
(23 ngram/suffix points by default) is measured once with the tuner's real objective (OFF recorded as trial 0,
then every point a real trial paired with OFF inside it, --repeats repeats on the search tasks, pruner none)
and saved (--grid-file; --reuse-grid reads it back); then, per seed, the tuner's TPE, Optuna's GPSampler and
a random search (--samplers) replay the measured values over the same space, duplicates free and the space
exhausted as in the tuner. Per seed and over seeds: regret after a third of the grid's measured trials,
measured trials to come within 5% of the grid's best (median and worst), and the target: within 5% of the
grid's best in at most a third of the grid's trials. Rich tables or --json.

`tuner-speed`: the tuner's trials per hour and time to an answer, whole `python -m tuner.search` runs on this
tree and (--before COMMIT) on a worktree of that commit, alternating; and the default study's projected wall time
at a stated scale (tokens/s, tokens per task), with the formula; bench/tuner_speed.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench import gguf_memory
from bench.engine import MIN_REPEATS, PROMPT_SETS, RATIOS
from bench.tuner.grid import DEFAULT_GRID_FILE
from bench.tuner.search import SAMPLERS
from common.errors import ConfigError
from engine.forward import PATHS


def _positive(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    eng = sub.add_parser(
        "engine",
        help="spectune engine vs transformers generate (tokens/s, acceptance, identical outputs)",
        description="spectune engine vs transformers generate: tokens/s, acceptance and identical greedy outputs.",
    )
    eng.add_argument("--model", default=None, help="target model folder (default: a cached tiny random model)")
    eng.add_argument(
        "--draft", default=None, help="draft model folder for draft_model / assisted generation (needs --model)"
    )
    eng.add_argument(
        "--mtp",
        default=None,
        help="MTP module folder for the mtp and mtp+ngram cases (needs --model; default: the target folder's ../mtp"
        " when it holds one, as models/spectune-tiny does)",
    )
    eng.add_argument(
        "--eagle3",
        default=None,
        help="EAGLE-3 head folder for the eagle3 cases (needs --model; default: the target folder's ../eagle3 when"
        " it holds one)",
    )
    eng.add_argument(
        "--prompts",
        choices=PROMPT_SETS,
        default="builtin",
        help="builtin: fixed generic texts; swe-lite: the agent's real context before the scripted expert's edit on"
        " 4 test instances (what a suite-fitted model such as spectune-tiny is measured on)",
    )
    eng.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    eng.add_argument(
        "--repeats", type=_positive, default=None, help=f"timed passes (default 5, >= {MIN_REPEATS} unless --quick)"
    )
    eng.add_argument("--max-new-tokens", type=_positive, default=None, help="new tokens per generation (default 128)")
    eng.add_argument("--gamma", type=_positive, default=4, help="draft tokens per step (default 4)")
    eng.add_argument(
        "--quick",
        action="store_true",
        help="smoke run for tests: tiny 2x64 target / 1x32 draft, 2 repeats, 24 new tokens, 2 prompts",
    )
    eng.add_argument(
        "--threads",
        type=_positive,
        default=None,
        help="torch CPU threads for the run (default: torch's default); restored afterwards",
    )
    eng.add_argument(
        "--dtype",
        default="float32",
        help="weights of both models: float32 (default), bfloat16, float64, or auto (engine.loading's choice)",
    )
    eng.add_argument(
        "--forward",
        choices=PATHS,
        default="auto",
        help="spectune's numeric path (engine/forward.py; default auto); every path's costs are profiled anyway",
    )
    eng.add_argument(
        "--device", default="cpu", help="cpu (default), cuda, cuda:N or auto: where both models and every case run"
    )
    eng.add_argument(
        "--profile",
        action="store_true",
        help="also where each spectune step's time goes: per phase (draft, forward, accept, stats, crop, commit,"
        " other) and the forward's cost by fed rows inside the generations beside the isolated R_k",
    )
    eng.add_argument("--no-progress", action="store_true", help="no progress output on stderr")
    _tuner_parser(sub)
    _crossengine_parser(sub)
    _batch_parser(sub)
    _concurrency_parser(sub)
    gguf_memory.add_parser(sub)
    _tuner_speed_parser(sub)
    return parser


def _concurrency_parser(sub: Any) -> None:
    from bench.concurrency import BACKENDS, DEFAULT_METHODS

    con = sub.add_parser(
        "concurrency",
        help="the seeds' load test: correct tasks/min with 1 and N agents at once, OFF and ON, on both backends",
        description="For each method and backend: correct tasks per minute serially and with N agents at once, OFF "
        "and ON side by side (OFF measured in the same repeat and level), acceptance, and the crossover.",
    )
    con.add_argument("--levels", default="1,4", help="comma list of agents at once (default 1,4)")
    con.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="comma list of conf/engine options")
    con.add_argument("--backends", default=",".join(BACKENDS), help=f"comma list from {', '.join(BACKENDS)}")
    con.add_argument("--split", default="test", help="swe-lite split (default test)")
    con.add_argument("--limit", type=_positive, default=20, help="tasks, a spread subset (default 20)")
    con.add_argument("--repeats", type=_positive, default=3, help="passes over every level and method (default 3)")
    con.add_argument("--threads", type=_positive, default=1, help="CPU threads of both engines (default 1)")
    con.add_argument("--out", default="runs/bench-concurrency", help="folder of the waves' run outputs")
    con.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")


def _batch_parser(sub: Any) -> None:
    from bench.batch import DRAFTERS, SIZES

    bat = sub.add_parser(
        "batch",
        help="the engine's aggregate decode tokens/s with N sessions verified together, OFF and each drafter",
        description="N sessions decoded together, every step one batched target forward: aggregate tokens/s per N "
        "and drafter, ON/OFF at each N, scaling over one session, streams against each prompt decoded alone.",
    )
    bat.add_argument("--model-dir", default="models/spectune-tiny", help="folder with target/ (draft/, mtp/)")
    bat.add_argument(
        "--sessions", default=",".join(map(str, SIZES)), help="comma list of batch sizes (default 1,2,4,8)"
    )
    bat.add_argument("--drafters", default=",".join(DRAFTERS), help=f"comma list from {', '.join(DRAFTERS)}")
    bat.add_argument("--gamma", type=_positive, default=4, help="draft tokens per step (default 4)")
    bat.add_argument("--max-new-tokens", type=_positive, default=64, help="new tokens per session (default 64)")
    bat.add_argument("--repeats", type=_positive, default=3, help="timed passes over every case (default 3)")
    bat.add_argument("--threads", type=_positive, default=1, help="torch CPU threads (default 1)")
    bat.add_argument("--forward", choices=PATHS, default="auto", help="numeric path (default auto)")
    bat.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto: where both models run")
    bat.add_argument(
        "--dtype", default="float32", help="weights of both models: float32 (default), bfloat16, float64 or auto"
    )
    bat.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def _crossengine_parser(sub: Any) -> None:
    cross = sub.add_parser(
        "crossengine",
        help="the same agent conversations through spectune's engine and llama-server: streams, acceptance, tok/s",
        description="Record N agent conversations (spectune, OFF), replay every turn through spectune's engine and "
        "a real llama-server per method, greedy on the same f32 weights: identical streams, acceptance side by side, "
        "decode tokens/s of both, and the server's ON/OFF predicted from spectune's acceptance and a server cost "
        "profile beside what it measured.",
    )
    cross.add_argument(
        "--model-dir", default="models/spectune-tiny", help="folder with target/ (and draft/, mtp/, eagle3/)"
    )
    cross.add_argument("--split", default="test", help="swe-lite split (default test)")
    cross.add_argument("--limit", type=_positive, default=20, help="conversations, a spread subset (default 20)")
    cross.add_argument(
        "--methods",
        default="ngram,suffix,draft_model,mtp,eagle3",
        help="comma list of ngram, suffix, ngram_cache, ngram_map_k, draft_model, mtp, eagle3, mtp+ngram, "
        "eagle3+ngram (none always runs)",
    )
    cross.add_argument("--gamma", type=_positive, default=4, help="draft tokens per step (default 4)")
    cross.add_argument("--threads", type=_positive, default=1, help="CPU threads of both engines (default 1)")
    cross.add_argument("--repeats", type=_positive, default=3, help="timed replays per method (default 3)")
    cross.add_argument("--binary", default=None, help="llama-server executable (default: the pinned build's)")
    cross.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")


def _tuner_parser(sub: Any) -> None:
    tun = sub.add_parser(
        "tuner",
        help="the tuner's search quality: a measured grid, then TPE, GP and random search replayed over it",
        description="The tuner's search quality: an exhaustive grid measured once with the real paired objective, "
        "then the tuner's samplers (TPE, GP, random) replayed over the measured values, seed by seed.",
    )
    tun.add_argument("--split", default="dev", help="swe-lite split of the search tasks (default dev)")
    tun.add_argument("--limit", type=_positive, default=4, help="search tasks, a spread subset (default 4)")
    tun.add_argument(
        "--repeats", type=_positive, default=3, help="repeats per task of every paired trial (run.repeats; default 3)"
    )
    tun.add_argument("--seeds", type=_positive, default=10, help="replayed searches per sampler (default 10)")
    tun.add_argument(
        "--trials",
        type=_positive,
        default=None,
        help="measured trials per search, duplicates not counted (default: the whole grid, until it is exhausted)",
    )
    tun.add_argument(
        "--startup-trials",
        type=int,
        default=None,
        help="startup trials of TPE and GP, trial 0 included (default: the tuner's, conf/study/default.yaml)",
    )
    tun.add_argument(
        "--samplers",
        default=",".join(SAMPLERS),
        help=f"comma list of the samplers replayed, from {', '.join(SAMPLERS)} (default: all)",
    )
    tun.add_argument(
        "--grid-file", type=Path, default=DEFAULT_GRID_FILE, help=f"the measured grid (default {DEFAULT_GRID_FILE})"
    )
    tun.add_argument("--reuse-grid", action="store_true", help="read --grid-file instead of measuring the grid")
    tun.add_argument(
        "--space",
        type=Path,
        default=None,
        help="grid space file (conf/space layout, lists of choices or integer ranges; default: the 23-point "
        "ngram/suffix grid)",
    )
    tun.add_argument("--threads", type=_positive, default=None, help="torch CPU threads while measuring")
    tun.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a conf/tune.yaml override for the measurement, e.g. --set agent.max_steps=8 (repeatable)",
    )
    tun.add_argument(
        "--pruners",
        default=None,
        help="also replay these study pruners over the grid's per-task ratios, a comma list from "
        "wilcoxon, halving, none (e.g. none,wilcoxon,halving): task runs spent and whether the best survives",
    )
    tun.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    tun.add_argument("--no-progress", action="store_true", help="no progress bar on stderr (trial lines stay)")


def _tuner_speed(args: argparse.Namespace) -> int:
    """`tuner-speed`: measured (unless --project-only) and projected; one JSON object with --json."""
    from rich.console import Console

    from bench import tuner_speed

    try:
        result = tuner_speed.main_run(args, Console(stderr=True))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # a study that failed: its output is in the log the line names
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result, default=str))
    else:
        tuner_speed.report(result, Console())
    return 0


def _tuner_speed_parser(sub: Any) -> None:
    speed = sub.add_parser(
        "tuner-speed",
        help="the tuner's trials per hour and time to an answer, before vs after, and the default study at a scale",
        description="Trials per hour and time to an answer of whole `python -m tuner.search` runs on this tree and "
        "(--before) on a commit, alternating; then the default study's projected wall time at a stated scale.",
    )
    speed.add_argument("--before", default=None, help="a commit to measure against (a git worktree of it)")
    speed.add_argument("--studies", type=_positive, default=2, help="studies per side, alternating (default 2)")
    speed.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override of the study, e.g. --set engine.backend=llama-server --set space=llama-server (repeatable)",
    )
    speed.add_argument("--tokens-per-s", type=float, default=40.0, help="decode tokens/s at the scale (default 40)")
    speed.add_argument(
        "--tokens-per-task", type=float, default=3000.0, help="tokens one task run generates (default 3000)"
    )
    speed.add_argument(
        "--agent-s", type=float, default=20.0, help="the agent's own seconds per task run: tools, grading (default 20)"
    )
    speed.add_argument("--project-only", action="store_true", help="only the projection at the stated scale")
    speed.add_argument("--log", default="runs/bench/tuner-speed.log", help="the studies' output (appended)")
    speed.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.benchmark == "engine":
        return _engine(parser, args)
    if args.benchmark == "tuner-speed":
        return _tuner_speed(args)
    if args.benchmark == "tuner":
        return _tuner(parser, args)
    if args.benchmark == "crossengine":
        return _crossengine(args)
    if args.benchmark == "batch":
        return _batch(parser, args)
    if args.benchmark == "concurrency":
        return _concurrency(parser, args)
    if args.benchmark == "gguf-memory":
        return gguf_memory.main(args)
    parser.error(f"unknown benchmark {args.benchmark!r}")  # unreachable: argparse checks choices
    return 2


def _concurrency(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from bench.concurrency import BACKENDS, ConcurrencySetup, render, run_concurrency_bench

    try:
        levels = tuple(sorted({int(x) for x in args.levels.split(",") if x.strip()}))
    except ValueError:
        parser.error(f"--levels takes a comma list of integers, got {args.levels!r}")
    backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    if not levels or min(levels) < 1 or not methods or any(b not in BACKENDS for b in backends):
        parser.error(f"--levels >= 1, --methods non-empty, --backends from {', '.join(BACKENDS)}")
    setup = ConcurrencySetup(levels, methods, backends, args.split, args.limit, args.repeats, args.threads, args.out)
    try:
        report = run_concurrency_bench(setup, progress=True)
    except (ValueError, FileNotFoundError) as exc:  # an unknown method, a missing model or binary
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report))
    else:
        render(report)
    return 0


def _batch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    import torch

    from bench.batch import DRAFTERS, BatchSetup, render, run_batch_bench

    try:
        sizes = tuple(sorted({int(x) for x in args.sessions.split(",") if x.strip()}))
    except ValueError:
        parser.error(f"--sessions takes a comma list of integers, got {args.sessions!r}")
    drafters = tuple(d.strip() for d in args.drafters.split(",") if d.strip())
    unknown = [d for d in drafters if d not in DRAFTERS]
    if unknown or not sizes or min(sizes) < 1:
        parser.error(f"--drafters from {', '.join(DRAFTERS)} and --sessions >= 1 (got {args.drafters!r}, {sizes})")
    torch.set_num_threads(args.threads)
    setup = BatchSetup(
        args.model_dir,
        sizes,
        drafters,
        args.gamma,
        args.max_new_tokens,
        args.repeats,
        args.forward,
        dtype=args.dtype,
        device=args.device,
    )
    try:
        report = run_batch_bench(setup, progress=not args.json)
    except (ValueError, FileNotFoundError) as exc:  # a bad --device / --dtype / --forward, a missing model folder
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report))
    else:
        render(report)
    return 0


def _engine(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    import torch
    from transformers.utils import logging as hf_logging

    from bench.engine import run_engine_bench

    repeats = args.repeats if args.repeats is not None else (2 if args.quick else 5)
    if repeats < MIN_REPEATS and not args.quick:
        parser.error(f"--repeats must be >= {MIN_REPEATS} for a measurement (use --quick for a smoke run)")
    max_new = args.max_new_tokens if args.max_new_tokens is not None else (24 if args.quick else 128)
    if args.draft is not None and args.model is None:
        parser.error("--draft needs --model (the draft drafts for that target, in its tokenizer or as text)")
    if args.mtp is not None and args.model is None:
        parser.error("--mtp needs --model (an MTP module is trained for one target)")
    mtp = args.mtp
    if mtp is None and args.model is not None and (Path(args.model).parent / "mtp" / "config.json").is_file():
        mtp = str(Path(args.model).parent / "mtp")  # a bundled pair's own MTP module (models/spectune-tiny/mtp)
    if args.eagle3 is not None and args.model is None:
        parser.error("--eagle3 needs --model (an EAGLE-3 head is trained for one target)")
    eagle3 = args.eagle3
    if eagle3 is None and args.model is not None and (Path(args.model).parent / "eagle3" / "config.json").is_file():
        eagle3 = str(Path(args.model).parent / "eagle3")

    # transformers' loading / saving progress bars and info logs would clutter stderr; restored afterwards.
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    threads = torch.get_num_threads()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        report = run_engine_bench(
            args.model,
            args.draft,
            repeats,
            max_new,
            args.gamma,
            args.quick,
            progress=not args.no_progress,
            prompt_set=args.prompts,
            dtype=args.dtype,
            forward=args.forward,
            device=args.device,
            mtp=mtp,
            profile=args.profile,
            eagle3=eagle3,
        )
    except (ValueError, FileNotFoundError) as exc:  # a bad --device / --dtype / --forward, a broken model folder
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    finally:
        torch.set_num_threads(threads)
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0


def _tuner(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from hydra.errors import HydraException

    from bench.tuner import render, run_tuner_bench
    from bench.tuner.pruners import parse_pruners
    from bench.tuner.search import parse_samplers
    from runners.cli import INPUT_ERRORS, one_line
    from runners.interrupt import Interrupted

    if args.reuse_grid and args.space is not None:
        parser.error("--space chooses a grid to measure; with --reuse-grid the grid file's own space is replayed")
    try:
        samplers = parse_samplers(args.samplers)  # before anything is measured
        pruners = parse_pruners(args.pruners) if args.pruners is not None else ()
        if args.startup_trials is not None and args.startup_trials < 0:
            raise ConfigError(f"--startup-trials must be >= 0, got {args.startup_trials}")
        report = run_tuner_bench(
            split=args.split,
            limit=args.limit,
            repeats=args.repeats,
            seeds=args.seeds,
            trials=args.trials,
            startup_trials=args.startup_trials,
            samplers=samplers,
            pruners=pruners,
            grid_file=args.grid_file,
            reuse_grid=args.reuse_grid,
            space_file=args.space,
            threads=args.threads,
            overrides=args.overrides,
            progress=not args.no_progress,
        )
    except (*INPUT_ERRORS, HydraException) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # before the grid's trials started (loading): nothing was written
        print("interrupted: no grid file was written", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0


def _crossengine(args: argparse.Namespace) -> int:
    from transformers.utils import logging as hf_logging

    from bench.crossengine import render, run_crossengine_bench
    from serving.llama_binary import LlamaServerMissing
    from serving.llama_server import LlamaServerError

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        report = run_crossengine_bench(
            model_dir=args.model_dir,
            split=args.split,
            limit=args.limit,
            methods=tuple(m for m in args.methods.split(",") if m),
            gamma=args.gamma,
            threads=args.threads,
            repeats=args.repeats,
            binary=args.binary,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except (ValueError, FileNotFoundError, LlamaServerMissing, LlamaServerError, RuntimeError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0


def _fmt_params(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.0f} k"


def _cross(report: dict[str, Any]) -> str:
    """A note when the draft's tokenizer differs from the target's (its drafts are carried over as text)."""
    return " (another tokenizer: drafts carried over as text)" if report.get("cross_tokenizer") else ""


def _model_line(m: dict[str, Any] | None) -> str:
    if m is None:
        return "none"
    return f"{m['arch']} {m['layers']}x{m['hidden']} ({_fmt_params(m['parameters'])} params, {m['forward']})"


def _kinds(kinds: list[str]) -> str:
    """`2 copy-heavy, 2 free` / `4 agent`: how many prompts of each kind."""
    labels = {"copy": "copy-heavy"}
    return ", ".join(f"{kinds.count(k)} {labels.get(k, k)}" for k in dict.fromkeys(kinds))


def render(report: dict[str, Any]) -> None:
    """Rich tables: throughput and acceptance per case, then ratios and the identity verdict."""
    from rich.table import Table

    from runners.report import table_console

    console = table_console()
    s = report["setup"]
    kinds = [p["kind"] for p in s["prompts"]]
    console.print(
        f"[bold]bench engine[/] device {s['device']} · threads {s['threads']} of {s['cpu_count']} CPUs"
        f" · load {s['load_average_1m']['start']}→{s['load_average_1m']['end']} · target {_model_line(s['target'])}"
        f" · draft {_model_line(s['draft'])}{_cross(s)}"
        f" · gamma {s['gamma']} · max_new_tokens {s['max_new_tokens']}"
        f" · repeats {s['repeats']} · prompts {len(kinds)} ({_kinds(kinds)})"
        f" · torch {s['torch']} · transformers {s['transformers']}"
    )

    cases = Table(title="Cases (tokens/s: median over repeats, min–max)")
    for col in ("case", "tokens/s", "min–max", "accept rate", "mean acc len", "drafted/draft", "tok/target fwd"):
        cases.add_column(col, justify="left" if col == "case" else "right", no_wrap=True)
    for name, t in report["tokens_per_s"].items():
        a = report["acceptance"][name]
        cases.add_row(
            name,
            f"{t['median']:.1f}",
            f"{t['min']:.1f}–{t['max']:.1f}",
            f"{a['acceptance_rate']:.3f}" if a["drafted"] else "–",
            f"{a['mean_accepted_length']:.2f}" if a["drafts"] else "–",
            f"{a['mean_draft_length']:.2f}" if a["drafts"] else "–",
            f"{a['tokens_per_target_forward']:.3f}",
        )
    for name, why in report["skipped"]["cases"].items():
        cases.add_row(name, "skipped", why, "", "", "", "")
    console.print(cases)

    ratios = Table(title="Ratios (tokens/s, > 1: spectune / ON faster; median of per-repeat ratios)")
    for col in ("ratio", "numerator / denominator", "value"):
        ratios.add_column(col, justify="right" if col == "value" else "left")
    for key, (a, b) in RATIOS.items():
        value = report[key]
        shown = f"{value:.3f}" if value is not None else f"skipped ({report['skipped']['ratios'][key]})"
        ratios.add_row(key, f"{a} / {b}", shown)
    console.print(ratios)

    verdict = "[green]true[/]" if report["identical"] else "[red]false[/]"
    console.print(f"identical: {verdict}  (deterministic across repeats: {report['deterministic']})")
    for key, check in report["identity"].items():
        if check["identical"]:
            continue
        for row in check["prompts"]:
            if not row["identical"]:
                console.print(
                    f"  {key}: {check['case']} != {check['reference']} on {row['prompt']}"
                    f" at new token {row['first_divergence']}"
                )
    console.print(f"[dim]tokens per target forward: {s['tokens_per_target_forward']}[/]")
    render_costs(report, console)


def render_costs(report: dict[str, Any], console) -> None:
    """The cost profile (t_1, R_k per model) and, per drafter, the bound E / (R + C) beside the measurement."""
    from rich.table import Table

    costs = report.get("costs") or {}
    profile = Table(
        title="Cost profile: one forward over k new tokens, R_k = t_k / t_1 (medians; bench/costs.py);"
        " * = the path the cases ran"
    )
    ks = sorted((costs.get("target") or {}).get("R", {}))
    for col in ("model", "path", "context", "t_1 ms", *[f"R_{k}" for k in ks[1:]]):
        profile.add_column(col, justify="left" if col in ("model", "path") else "right")
    paths = costs.get("paths") or {name: {"": costs[name]} for name in ("target", "draft") if costs.get(name)}
    for name, by_path in paths.items():
        chosen = (costs.get(name) or {}).get("path")
        for path, c in by_path.items():
            if "unavailable" in c:
                profile.add_row(name, path, "-", "unavailable", c["unavailable"][:60])
                continue
            mark = " *" if c.get("path") == chosen else ""
            profile.add_row(
                name,
                f"{path}{mark}",
                str(c["context"]),
                f"{c['t_s'][1] * 1e3:.2f}",
                *[f"{c['R'][k]:.2f}" for k in ks[1:]],
            )
    console.print(profile)
    limits = Table(
        title="How close to the limit: generation ON / OFF against E / (R + C), R = d·R_k + (1 - d) from the"
        " profile; the same from the engine's timers inside the generations (gen)"
    )
    cols = ("drafter", "E (tokens/step vs plain)", "k", "d (drafting steps)", "R", "C", "bound", "measured ON/OFF")
    for col in (*cols, "measured / bound", "R gen", "C gen", "bound gen", "measured / bound gen"):
        limits.add_column(col, justify="left" if col == "drafter" else "right")

    def f(v: float | None, spec: str = ".2f") -> str:
        return "-" if v is None else format(v, spec)

    for drafter, row in (report.get("limits") or {}).items():
        limits.add_row(
            drafter,
            f(row["E"]),
            str(row["k"]),
            f(row["drafting_share"]),
            f(row["R"]),
            f(row["C"], ".3f"),
            f(row["bound"]),
            f(row["measured_on_vs_off"]),
            f(row["measured_over_bound"]),
            f(row.get("R_in_generation")),
            f(row.get("C_in_generation"), ".3f"),
            f(row.get("bound_in_generation")),
            f(row.get("measured_over_bound_in_generation")),
        )
    console.print(limits)
    render_step_profile(report, console)


def render_step_profile(report: dict[str, Any], console) -> None:
    """With --profile: microseconds per step by phase, and R_k inside the generations beside the profile's."""
    from rich.table import Table

    from engine.profile import PHASES

    rows = report.get("step_profile")
    if not rows:
        return
    table = Table(
        title="Where a decode step's time goes (us per step, timed passes; engine/profile.py); loop = all but the"
        " forwards; R_k gen = a k-row forward inside the generations ÷ plain decoding's 1-row one, beside the profile's"
    )
    for col in ("case", "steps", *PHASES, "total", "loop", "R_k gen/profile"):
        table.add_column(col, justify="left" if col in ("case", "R_k gen/profile") else "right", no_wrap=True)
    for case, row in rows.items():
        us = row["per_step_us"]
        gen = {int(k): v for k, v in row["R_in_generation_by_rows"].items()}  # int keys, str after a JSON trip
        iso = {int(k): v for k, v in row["R_profile_by_rows"].items()}
        busiest = sorted(row["forward_by_rows"].items(), key=lambda kv: -kv[1]["forwards"])[:2]
        ks = sorted(int(k) for k, _ in busiest if int(k) in gen)
        r = "  ".join(f"k={k} {gen[k]:.2f}/{iso[k]:.2f}" if k in iso else f"k={k} {gen[k]:.2f}" for k in ks)
        table.add_row(
            case.removeprefix("spectune_"),
            str(row["steps"]),
            *[f"{us[p]:.0f}" for p in PHASES],
            f"{us['total']:.0f}",
            f"{us['total'] - us['forward'] - us['prefill']:.0f}",
            r or "-",
        )
    console.print(table)


if __name__ == "__main__":
    sys.exit(main())
