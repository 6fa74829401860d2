"""Cross-engine check: the same agent conversations through spectune's engine and a real llama-server.

    python -m bench crossengine [--limit 20] [--split test] [--threads 1] [--methods ngram,draft_model,mtp,eagle3]

1. Record: the agent solves N swe-lite tasks with spectune's engine, speculation OFF (real sandboxes); every
   turn's prompt ids and reply are kept. These conversations are the reference.
2. Replay: every turn of every conversation goes through both engines for each method (`none` first), on
   the same f32 weights (GGUF for the server), greedy, each conversation in one session / one server slot so
   prefix reuse works as in the runner. llama-server runs exactly the flags the exporter writes for the
   method. Conversation by conversation the two engines alternate, so machine drift hits both.
3. Report: identical streams (every turn equal to the reference; expected N/N on both engines, ON and OFF),
   acceptance of each method on both engines side by side, decode tokens/s of both with every repeat.
4. Predict before measuring: a quick cost profile of the server on a typical recorded agent context (one
   short n-gram request per verify size k gives R_k = one k-token verify step ÷ one plain step; a server on
   the draft GGUF gives the draft model's step; a draft-mtp / draft-eagle3 request gives the head's drafting per
   step) and the
   acceptance spectune's engine measured give the seeds' estimate E / (R + C) of the server's ON/OFF decode
   speed, printed beside what the server then measured.
"""

from __future__ import annotations

import itertools
import statistics
import time
from pathlib import Path
from typing import Any

from agents.episode import run_episode
from agents.loop import AgentConfig
from agents.recording import Conversation, RecordingModel, replay
from bench.costs import bound
from common.errors import ConfigError
from engine.engine import Engine, EngineConfig
from engine.stats import GenerationStats
from runners.backends import EngineBackend, ServerBackend, ServerSettings, context_of
from runners.models import Models, load_models, resolve_model_path
from serving.eagle3_gguf import cached_eagle3_gguf
from serving.gguf import cached_gguf
from serving.llama_binary import find_llama_server
from serving.llama_server import LlamaServer
from serving.mtp_gguf import cached_mtp_gguf
from serving.stats import DRAFTS
from tasks.environment import make_environment
from tasks.sandbox.owner import owned_tempdir
from tasks.suites import load_suite

MODEL_DIR = "models/spectune-tiny"
# Each method as one EngineConfig; llama-server runs what the exporter writes for it. ngram matches exactly
# min_match tokens, as llama.cpp's ngram-simple does (size-n), so the two lookups are the same rule.
METHODS: dict[str, dict[str, Any]] = {
    "none": {"drafter": "none"},
    "ngram": {"drafter": "ngram", "options": {"min_match": 2, "max_match": 2}},
    "suffix": {"drafter": "suffix", "options": {"scope": "session"}},
    "draft_model": {"drafter": "draft_model"},
    "mtp": {"drafter": "mtp"},  # on the server: the module inside a mimo2 GGUF (serving/mtp_gguf.py)
    "eagle3": {"drafter": "eagle3"},  # on the server: draft-eagle3 with the head's own GGUF (serving/eagle3_gguf.py)
    # first-wins combinations: on the server --spec-type ngram-simple,draft-mtp (lookup first, the head elsewhere)
    "mtp+ngram": {"drafter": "mtp+ngram", "options": {"policy": "first", "ngram.min_match": 2, "ngram.max_match": 2}},
    "eagle3+ngram": {
        "drafter": "eagle3+ngram",
        "options": {"policy": "first", "ngram.min_match": 2, "ngram.max_match": 2},
    },
}
# llama.cpp's own lookups, ported (engine/drafters/ngram_cache.py, ngram_map_k.py), each at the draft length the
# server uses whatever --gamma says: ngram-cache always drafts up to 8 tokens, ngram-map-k up to size-m.
METHODS["ngram_cache"] = {"drafter": "ngram_cache", "gamma": 8}
METHODS["ngram_map_k"] = {"drafter": "ngram_map_k", "gamma": 8, "options": {"size_n": 2, "size_m": 8}}
# Drafting heads whose cost per drafting step the profile measures: the server's --spec-type for each.
HEAD_KINDS = {"mtp": "draft-mtp", "eagle3": "draft-eagle3"}


def typical_context(conversations: list[Conversation]) -> list[int]:
    """The prompt of the turn at the reply-token-weighted median context length: where most decoding happens.

    A step's cost grows with the context it attends over, so the server's cost profile runs there rather than
    on a short synthetic prompt (too cheap) or the longest turn (too dear).
    """
    turns = sorted((t for c in conversations for t in c.turns), key=lambda t: len(t.prompt))
    half, seen = sum(len(t.reply) for t in turns) / 2, 0
    for turn in turns:
        seen += len(turn.reply)
        if seen >= half:
            return turn.prompt
    return turns[-1].prompt


def record(models: Models, split: str, limit: int, progress) -> list[Conversation]:
    """The reference conversations: the agent on `limit` spread tasks of `split`, spectune's engine, OFF, greedy."""
    instances = load_suite("swe-lite", split, limit, None, None, "spread")
    environment = make_environment("swe-lite")
    backend = EngineBackend(Engine(models.target, EngineConfig()))
    tokenizer = models.target.tokenizer
    conversations = []
    for i, instance in enumerate(instances):
        conversation = Conversation(instance.instance_id)
        model = RecordingModel(backend.agent_model(tokenizer, "reference", 0), conversation)
        with owned_tempdir("crossengine-") as tmp:
            run_episode(instance, model, environment, tokenizer, AgentConfig(), Path(tmp) / "trajectory.json")
        conversations.append(conversation)
        progress(f"recorded {i + 1}/{len(instances)} {instance.instance_id}: {len(conversation.turns)} turns")
    return conversations


def decode_rate(stats: GenerationStats) -> float | None:
    """Decode tokens/s as the runner's summary counts it: new tokens ÷ time outside prefill."""
    seconds = sum(stats.time_s.values()) - stats.time_s.get("prefill", 0.0)
    return stats.new_tokens / seconds if seconds > 0 else None


def server_profile(
    settings: ServerSettings,
    prompt: list[int],
    gamma: int,
    draft: bool,
    repeats: int = 3,
    mtp: bool = False,
    eagle3: bool = False,
) -> dict[str, Any]:
    """The server's cost profile: plain step t_1, R_k for verify sizes k = 2..gamma+1, the drafters' own costs.

    R_k comes from short greedy requests per size-m = 1..gamma with ngram-simple (size-n 1) after `prompt` (an
    agent context, which repeats itself enough that most steps draft): a step costs d·t_k + (1 - d)·t_1 with d
    the share of steps that drafted (/metrics counts them), so t_k = (t_step - (1 - d)·t_1) / d at the measured
    mean verify size k. Lookup drafting is ~free, so this is the verify cost alone; the draft model's step is
    t_1 of a server running the draft GGUF as its model. A head's drafting per drafting step (MTP, EAGLE-3), C
    (in t_1), is what a draft-mtp / draft-eagle3 request's steps cost beyond their verify:
    (t_step - (1 - d)·t_1 - d·R_k·t_1) / (d·t_1).
    Each figure is the median of `repeats` requests of 128 tokens after an untimed one.
    """
    base = ["-np", "1", "--temp", "0", "--min-p", "0"]
    body = {"prompt": prompt, "n_predict": 128, "ignore_eos": True, "return_tokens": True, "cache_prompt": False}

    def steps(model: Path, args: list[str]) -> list[tuple[float, float, float]]:
        """(seconds per decode step, share of steps that drafted, mean verify size) of each timed request."""
        log = settings.log_dir / "profile.log" if settings.log_dir else None
        out = []
        with LlamaServer(
            settings.binary, model, base + args, context=settings.context, threads=settings.threads, log_path=log
        ) as server:
            server.post("/completion", body)  # untimed: the first request's allocations
            for _ in range(repeats):
                before = server.metrics().get(DRAFTS, 0.0)
                reply = server.post("/completion", body)
                drafts = server.metrics().get(DRAFTS, 0.0) - before  # verification steps that carried a draft
                t = reply["timings"]
                n_steps = max(len(reply["tokens"]) - t.get("draft_n_accepted", 0), 1)
                k = 1 + t.get("draft_n", 0) / drafts if drafts else 1.0
                out.append((t["predicted_ms"] / 1000.0 / n_steps, min(drafts / n_steps, 1.0), k))
        return out

    t1 = statistics.median(t for t, _, _ in steps(settings.target_gguf, ["--spec-type", "none"]))
    points = []
    for m in range(1, gamma + 1):
        args = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1", "--spec-ngram-simple-size-m", str(m)]
        runs = [(t, d, k) for t, d, k in steps(settings.target_gguf, args) if d > 0]
        if runs:
            rs = [(t - (1 - d) * t1) / d / t1 for t, d, _ in runs]
            points.append(
                {
                    "size_m": m,
                    "k": statistics.median(k for _, _, k in runs),
                    "R": statistics.median(rs),
                    "R_per_repeat": rs,
                    "drafting_share": statistics.median(d for _, d, _ in runs),
                }
            )
    out: dict[str, Any] = {"t1_s": t1, "points": points}
    heads: dict[str, tuple[Path, list[str]]] = {}
    if mtp and settings.mtp_gguf is not None:  # the MTP layer lives inside the mimo2 GGUF the server loads
        heads["mtp"] = (settings.mtp_gguf, [])
    if eagle3 and settings.eagle3_gguf is not None:
        heads["eagle3"] = (settings.target_gguf, ["--model-draft", str(settings.eagle3_gguf)])
    for name, (model, extra) in heads.items():
        args = ["--spec-type", HEAD_KINDS[name], *extra, "--spec-draft-n-max", str(gamma)]
        costs = [
            (t - (1 - d) * t1 - d * r_k * t1) / (d * t1)
            for t, d, k in steps(model, args)
            if d > 0 and (r_k := r_at(points, k)) is not None
        ]
        if costs:
            out[f"{name}_draft_per_step"] = statistics.median(costs)
            out[f"{name}_draft_per_step_per_repeat"] = costs
    if draft and settings.draft_gguf is not None:
        out["draft_t1_s"] = statistics.median(t for t, _, _ in steps(settings.draft_gguf, ["--spec-type", "none"]))
    return out


def r_at(points: list[dict[str, Any]], k: float) -> float | None:
    """R at verify size k, linear between the profile's points (clamped at their ends)."""
    pts = sorted((p["k"], p["R"]) for p in points)
    if not pts:
        return None
    if k <= pts[0][0]:
        return pts[0][1]
    for (k0, r0), (k1, r1) in itertools.pairwise(pts):
        if k <= k1:
            return r0 + (r1 - r0) * (k - k0) / (k1 - k0) if k1 > k0 else r1
    return pts[-1][1]


def predict(stats: GenerationStats, profile: dict[str, Any], drafter: str) -> dict[str, Any]:
    """E / (R + C) for the server from spectune's acceptance on the same turns and the server's cost profile."""
    steps = stats.emitting_forwards
    if not steps:
        return {"E": None, "R": None, "C": None, "predicted": None}
    e = stats.new_tokens / steps  # tokens per decode step; plain decoding makes 1
    d = min(stats.drafts / steps, 1.0)
    length = stats.drafted / stats.drafts if stats.drafts else 0.0
    r_k = r_at(profile["points"], 1 + length) if stats.drafts else 1.0
    if r_k is None:
        return {"E": e, "R": None, "C": None, "predicted": None}
    r = d * r_k + (1 - d)
    if "+" in drafter and any(part in HEAD_KINDS or part == "draft_model" for part in drafter.split("+")):
        # which child drafted each step is not in the statistics, so the model child's share of C is unknown
        return {"E": e, "R": r, "C": None, "predicted": None}
    c = 0.0  # lookups: a hash or scan on the CPU, already inside the profile's step times
    if drafter == "draft_model" and "draft_t1_s" in profile:
        c = d * length * profile["draft_t1_s"] / profile["t1_s"]  # `length` one-token draft steps per drafting step
    if drafter in HEAD_KINDS and f"{drafter}_draft_per_step" in profile:
        c = d * profile[f"{drafter}_draft_per_step"]
    return {"E": e, "R": r, "C": c, "predicted": bound(e, r, c)}


def run_crossengine_bench(
    *,
    model_dir: str = MODEL_DIR,
    split: str = "test",
    limit: int = 20,
    methods: tuple[str, ...] = ("ngram", "suffix", "draft_model", "mtp", "eagle3"),
    gamma: int = 4,
    threads: int = 1,
    repeats: int = 3,
    binary: str | None = None,
    ggufs: dict[str, Path] | None = None,
    progress=print,
) -> dict[str, Any]:
    """Record, replay on both engines, profile the server, report (module docstring).

    `ggufs`: {"target": file, "draft": file, "mtp": mimo2 file, "eagle3": head file} to use instead of converting
    the folders (cached).
    """
    import torch

    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ConfigError(f"unknown method(s) {unknown}; allowed: {sorted(METHODS)}")
    torch.set_num_threads(threads)
    root = Path(resolve_model_path(model_dir))
    parts = {p for m in methods for p in m.split("+")}  # a combination needs its model child's weights
    wants_draft, wants_mtp, wants_eagle3 = "draft_model" in parts, "mtp" in parts, "eagle3" in parts
    models = load_models(
        str(root / "target"),
        str(root / "draft") if wants_draft else None,
        dtype="float32",
        mtp=str(root / "mtp") if wants_mtp else None,
        eagle3=str(root / "eagle3") if wants_eagle3 else None,
    )
    settings = ServerSettings(
        binary=find_llama_server(binary),
        target_gguf=(ggufs or {}).get("target") or cached_gguf(root / "target", "f32"),
        draft_gguf=((ggufs or {}).get("draft") or cached_gguf(root / "draft", "f32")) if wants_draft else None,
        mtp_gguf=((ggufs or {}).get("mtp") or cached_mtp_gguf(root / "target", root / "mtp")) if wants_mtp else None,
        eagle3_gguf=((ggufs or {}).get("eagle3") or cached_eagle3_gguf(root / "target", root / "eagle3"))
        if wants_eagle3
        else None,
        context=context_of(models.target, None),
        threads=threads,
    )
    progress(f"llama-server {settings.binary.describe()}; threads {threads}")
    started = time.monotonic()
    conversations = record(models, split, limit, progress)
    stop = frozenset(models.target.eos_token_ids)
    tokenizer = models.target.tokenizer
    order = ["none", *[m for m in methods if m != "none"]]
    configs = {m: EngineConfig(**{"gamma": gamma, **METHODS[m]}) for m in order}  # a method's own gamma wins
    builtin = {
        m: EngineBackend(Engine(models.target, c, draft=models.draft, mtp=models.mtp, eagle3=models.eagle3))
        for m, c in configs.items()
    }
    server = {m: ServerBackend(c, settings, stop) for m, c in configs.items()}
    results: dict[str, dict[str, Any]] = {
        m: {
            engine: {"stats": GenerationStats(), "turns_equal": 0, "conversations_equal": 0, "rates": []}
            for engine in ("spectune", "llama-server")
        }
        for m in order
    }
    try:
        for repeat in range(repeats):
            for m in order:
                backends = {"spectune": builtin[m], "llama-server": server[m]}
                for b in backends.values():
                    b.reset()
                per_repeat = {e: GenerationStats() for e in backends}
                for conversation in conversations:
                    for engine, backend in backends.items():
                        done = replay(backend.agent_model(tokenizer, engine, 0), conversation)
                        per_repeat[engine] = per_repeat[engine] + done.stats
                        if repeat == 0:
                            row = results[m][engine]
                            row["stats"] = row["stats"] + done.stats
                            row["turns_equal"] += done.turns_equal
                            row["conversations_equal"] += done.identical
                for engine, stats in per_repeat.items():
                    results[m][engine]["rates"].append(decode_rate(stats))
                progress(
                    f"repeat {repeat + 1}/{repeats} {m}: "
                    + ", ".join(f"{e} {results[m][e]['rates'][-1]:.0f} tok/s" for e in backends)
                )
        longest = max(c.gamma for c in configs.values())  # R_k up to the longest draft any method asks for
        profile = server_profile(
            settings, typical_context(conversations), longest, wants_draft, mtp=wants_mtp, eagle3=wants_eagle3
        )
    finally:
        for b in server.values():
            b.close()
    return _report(
        conversations, results, profile, configs, settings, threads, repeats, split, time.monotonic() - started
    )


def _report(conversations, results, profile, configs, settings, threads, repeats, split, wall) -> dict[str, Any]:
    turns = sum(len(c.turns) for c in conversations)
    off = {e: results["none"][e]["rates"] for e in ("spectune", "llama-server")}
    rows: dict[str, Any] = {}
    for m, by_engine in results.items():
        row: dict[str, Any] = {
            "config": {"drafter": configs[m].drafter, "gamma": configs[m].gamma, "options": configs[m].options}
        }
        for engine, r in by_engine.items():
            stats: GenerationStats = r["stats"]
            rates = r["rates"]
            ratios = [a / b for a, b in zip(rates, off[engine], strict=True) if a and b]
            row[engine] = {
                "conversations_identical": r["conversations_equal"],
                "turns_identical": r["turns_equal"],
                "acceptance_rate": stats.acceptance_rate,
                "mean_accepted_length": stats.mean_accepted_length,
                "drafted": stats.drafted,
                "accepted": stats.accepted,
                "new_tokens": stats.new_tokens,
                "reused_tokens": stats.reused_tokens,
                "decode_tokens_per_s": rates,
                "decode_tokens_per_s_median": statistics.median(r for r in rates if r) if any(rates) else None,
                "on_vs_off": ratios,
                "on_vs_off_median": statistics.median(ratios) if ratios else None,
            }
        row["server_args"] = ServerBackend(configs[m], settings, frozenset()).args
        row["prediction"] = predict(by_engine["spectune"]["stats"], profile, configs[m].drafter)
        rows[m] = row
    return {
        "setup": {
            "split": split,
            "conversations": len(conversations),
            "turns": turns,
            "threads": threads,
            "repeats": repeats,
            "binary": settings.binary.describe(),
            "target_gguf": str(settings.target_gguf),
            "eagle3_gguf": str(settings.eagle3_gguf) if settings.eagle3_gguf else None,
            "wall_s": wall,
        },
        "methods": rows,
        "server_profile": profile,
        "identical": all(
            rows[m][e]["conversations_identical"] == len(conversations)
            for m in rows
            for e in ("spectune", "llama-server")
        ),
    }


def render(report: dict[str, Any]) -> None:
    """Rich tables: streams and acceptance side by side, tokens/s of both, the prediction beside the measurement."""
    from rich.table import Table

    from runners.report import table_console

    console = table_console()
    s = report["setup"]
    n = s["conversations"]
    console.print(
        f"[bold]bench crossengine[/] {n} swe-lite/{s['split']} conversations ({s['turns']} turns) · threads "
        f"{s['threads']} · repeats {s['repeats']} · {s['binary']} · {s['wall_s']:.0f} s"
    )
    table = Table(title="Same turns, both engines (identical: every turn equal to the reference OFF stream)")
    for col in (
        "method",
        "identical spectune",
        "identical server",
        "accept spectune",
        "accept server",
        "acc len spectune",
        "acc len server",
        "tok/s spectune",
        "tok/s server",
        "ON/OFF spectune",
        "ON/OFF server",
        "predicted server",
    ):
        table.add_column(col, justify="left" if col == "method" else "right")

    def f(v, spec=".2f"):
        return "-" if v is None else format(v, spec)

    for m, row in report["methods"].items():
        a, b = row["spectune"], row["llama-server"]
        table.add_row(
            m,
            f"{a['conversations_identical']}/{n}",
            f"{b['conversations_identical']}/{n}",
            f(a["acceptance_rate"], ".3f"),
            f(b["acceptance_rate"], ".3f"),
            f(a["mean_accepted_length"]),
            f(b["mean_accepted_length"]),
            f(a["decode_tokens_per_s_median"], ".0f"),
            f(b["decode_tokens_per_s_median"], ".0f"),
            f(a["on_vs_off_median"]),
            f(b["on_vs_off_median"]),
            f(row["prediction"]["predicted"]),
        )
    console.print(table)
    for m, row in report["methods"].items():
        p = row["prediction"]
        reps = " / ".join(f(v) for v in row["llama-server"]["on_vs_off"])
        console.print(
            f"  {m}: server ON/OFF per repeat {reps}; predicted E {f(p['E'])} / (R {f(p['R'])} + C {f(p['C'], '.3f')})"
            f" = {f(p['predicted'])}; args {' '.join(row['server_args'])}"
        )
    pts = ", ".join(f"k={p['k']:.1f}: R={p['R']:.2f}" for p in report["server_profile"]["points"])
    console.print(f"  server profile: t_1 {report['server_profile']['t1_s'] * 1e3:.2f} ms; {pts}")
    verdict = "[green]true[/]" if report["identical"] else "[red]false[/]"
    console.print(f"identical streams on both engines, every method: {verdict}")
