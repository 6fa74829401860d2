"""`python -m bench gguf-memory`: serving.gguf_memory's estimate beside what llama-server reports when loading.

Per target file type (f32, q8_0, q4_k_m when serving.quantize exists) x KV type (f16, q8_0): weights, KV and
compute buffer in MiB, estimated and reported (the server's own load lines, serving.gguf_memory.reported_sizes),
and estimated / reported. Then the drafters (a draft model, the EAGLE-3 head, the MTP file) and two synthetic
files the bundled ones cannot stand for: a Qwen3-4B-shaped header (2560 wide, 9728 FFN, 32/8 heads of 128,
a 151936 vocabulary; 2 of its 36 layers, zero Q4_0 weights) and the MTP file with a 128-token sliding window.

Every server runs with `-lv 4` (the load lines are hidden below it) and `-nr`: on a CPU, weight repacking keeps
a second, repacked copy of quantised tensors beside the mapped file (and its AMX path dies with SIGILL on some
virtual machines); a GPU holds one copy, which is what the estimate counts.
"""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.cache import cache_root
from common.files import atomic_path
from serving.gguf_file import read_gguf
from serving.gguf_memory import MIB, GgufMemory, estimate, reported_sizes
from serving.llama_binary import PINNED, LlamaBinary
from serving.llama_server import LlamaServer

MODELS = Path(__file__).resolve().parents[1] / "models" / "spectune-tiny"
FILE_TYPES = ("f32", "q8_0", "q4_k_m")
KV_TYPES = ("f16", "q8_0")
QUANTIZE_MISSING = "serving.quantize not yet available"
MEASURED = ("weights", "kv", "compute")
# A Qwen3-4B header (its config.json), cut to 2 of 36 layers: every per-layer and per-token term is the real one.
QWEN3_4B_LIKE = {"n_layer": 2, "n_embd": 2560, "n_ff": 9728, "n_head": 32, "n_head_kv": 8, "head_dim": 128}
QWEN3_VOCAB = 151936


@dataclass(frozen=True)
class Case:
    """One server start: its files, flags and the matching estimate's keywords."""

    name: str  # row label
    kv: str  # -ctk/-ctv
    model: Path
    args: tuple[str, ...] = ()  # extra server flags (a drafter)
    context: int = 4096
    slots: int = 1
    unified: bool = True  # --kv-unified with several slots (spectune's exports write it), else -c / slots each
    estimate: dict[str, Any] = field(default_factory=dict)  # draft=, head=, mtp= for serving.gguf_memory.estimate


class QuantizeUnavailable(RuntimeError):
    """No q4_k_m file can be made here: serving.quantize or the pinned llama-quantize is missing (the reason)."""


def quantized(source: Path, kind: str) -> Path:
    """`source` quantised to `kind` by serving.quantize; QuantizeUnavailable saying what is missing."""
    try:
        module = importlib.import_module("serving.quantize")
    except ImportError:
        raise QuantizeUnavailable(QUANTIZE_MISSING) from None
    try:
        return Path(module.cached_quantized(source, kind))
    except FileNotFoundError as exc:  # no llama-quantize in the pinned build yet
        raise QuantizeUnavailable(str(exc)) from None


def target_file(kind: str) -> Path:
    """The bundled target as a GGUF of `kind` (f32 and q8_0 converted, q4_k_m quantised from f32)."""
    from serving.gguf import cached_gguf

    if kind in ("f32", "q8_0"):
        return cached_gguf(MODELS / "target", kind)
    return quantized(cached_gguf(MODELS / "target", "f32"), kind)


def synthetic_gguf(out: Path, template: Path | None, *, vocab: int, **shape: int) -> Path:
    """A qwen3 GGUF with zero Q4_0 weights (norms f32 ones) of `shape` (QWEN3_4B_LIKE's keys), the template's
    tokenizer padded with placeholder tokens to `vocab` (no template: placeholders only, a header for the memory
    model that llama-server need not load); written once (atomically), the path returned."""
    import numpy as np
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFWriter, TokenType

    if out.is_file():
        return out
    n_layer, n_embd, n_ff = shape["n_layer"], shape["n_embd"], shape["n_ff"]
    n_head, n_head_kv, head_dim = shape["n_head"], shape["n_head_kv"], shape["head_dim"]
    fields = GGUFReader(str(template)).fields if template else {}
    tokens = list(fields["tokenizer.ggml.tokens"].contents()) if fields else []
    types = list(fields["tokenizer.ggml.token_type"].contents()) if fields else []
    tokens += [f"<synthetic_{i}>" for i in range(vocab - len(tokens))]
    types += [TokenType.NORMAL] * (vocab - len(types))
    q4, (block, size) = GGMLQuantizationType.Q4_0, GGML_QUANT_SIZES[GGMLQuantizationType.Q4_0]
    with atomic_path(out) as tmp:
        w = GGUFWriter(str(tmp), "qwen3")
        w.add_name("synthetic")
        w.add_file_type(2)  # MOSTLY_Q4_0
        w.add_block_count(n_layer)
        w.add_context_length(40960)
        w.add_embedding_length(n_embd)
        w.add_feed_forward_length(n_ff)
        w.add_head_count(n_head)
        w.add_head_count_kv(n_head_kv)
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_rope_freq_base(1e6)
        w.add_layer_norm_rms_eps(1e-6)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(list(fields["tokenizer.ggml.merges"].contents()) if fields else [])
        w.add_bos_token_id(0)
        w.add_eos_token_id(0)

        def matrix(name: str, rows: int, cols: int) -> None:
            w.add_tensor(name, np.zeros((rows, cols // block * size), np.uint8), raw_dtype=q4)

        matrix("token_embd.weight", vocab, n_embd)  # tied: the output reuses it
        w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
        for il in range(n_layer):
            p = f"blk.{il}."
            norms = {"attn_norm": n_embd, "ffn_norm": n_embd, "attn_q_norm": head_dim, "attn_k_norm": head_dim}
            for norm, width in norms.items():
                w.add_tensor(p + norm + ".weight", np.ones(width, np.float32))
            matrix(p + "attn_q.weight", n_head * head_dim, n_embd)
            matrix(p + "attn_k.weight", n_head_kv * head_dim, n_embd)
            matrix(p + "attn_v.weight", n_head_kv * head_dim, n_embd)
            matrix(p + "attn_output.weight", n_embd, n_head * head_dim)
            matrix(p + "ffn_gate.weight", n_ff, n_embd)
            matrix(p + "ffn_up.weight", n_ff, n_embd)
            matrix(p + "ffn_down.weight", n_embd, n_ff)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return out


def qwen3_4b_like(template: Path) -> Path:
    """The Qwen3-4B-shaped synthetic file, kept in spectune's GGUF cache."""
    out = cache_root("gguf") / f"synthetic-qwen3-4b-like-2layers-q4_0-{PINNED}.gguf"
    return synthetic_gguf(out, template, vocab=QWEN3_VOCAB, **QWEN3_4B_LIKE)


def with_metadata(source: Path, out: Path, changes: dict[str, Any]) -> Path:
    """A copy of `source` with some metadata values replaced (same types), written once, atomically."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    if out.is_file():
        return out
    reader = GGUFReader(str(source))
    with atomic_path(out) as tmp:
        w = GGUFWriter(str(tmp), reader.fields["general.architecture"].contents())
        for key, found in reader.fields.items():
            if key.startswith("GGUF.") or key == "general.architecture":
                continue
            kind = found.types[0]
            sub = found.types[-1] if kind == GGUFValueType.ARRAY else None
            w.add_key_value(key, changes.get(key, found.contents()), kind, sub_type=sub)
        for t in reader.tensors:
            w.add_tensor(t.name, t.data, raw_shape=list(reversed(t.shape.tolist())), raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return out


def sliding_mtp_file(mtp_file: Path) -> Path:
    """The MTP file with a 128-token window on layers 0, 2 and its MTP layer 4 (the bundled one slides 1M)."""
    pattern = [1, 0, 1, 0, 1]
    out = mtp_file.with_name(f"{mtp_file.stem}-swa128.gguf")
    changes = {"mimo2.attention.sliding_window": 128, "mimo2.attention.sliding_window_pattern": pattern}
    return with_metadata(mtp_file, out, changes)


def measure(binary: LlamaBinary, case: Case, threads: int = 2) -> dict[str, float]:
    """Start the server for `case`, read its load lines, stop it: reported_sizes of its log."""
    args = ["-lv", "4", "-nr", "-np", str(case.slots), "-ctk", case.kv, "-ctv", case.kv, *case.args]
    args += ["-kvu"] if case.unified and case.slots > 1 else []
    with tempfile.TemporaryDirectory(prefix="spectune-gguf-memory-") as tmp:
        log = Path(tmp) / "server.log"
        with LlamaServer(binary, case.model, args, context=case.context, threads=threads, log_path=log) as server:
            text = server.log_text()
    return reported_sizes(text)


def estimated(case: Case) -> GgufMemory:
    """serving.gguf_memory.estimate for `case` (drafters' caches stay f16, as llama-server's -ctkd/-ctvd do)."""
    extra = {k: read_gguf(v) if isinstance(v, Path) else v for k, v in case.estimate.items()}
    return estimate(
        read_gguf(case.model),
        context=case.context,
        slots=case.slots,
        kv_unified=case.unified,
        cache_type_k=case.kv,
        cache_type_v=case.kv,
        **extra,
    )


def cases(progress: Callable[[str], None] = lambda line: None) -> tuple[list[Case], dict[str, str]]:
    """Every case to measure, and the ones skipped with the reason (q4_k_m without serving.quantize)."""
    from serving.eagle3_gguf import cached_eagle3_gguf
    from serving.gguf import cached_gguf
    from serving.mtp_gguf import cached_mtp_gguf

    found, skipped = [], {}
    for kind in FILE_TYPES:
        try:
            path = target_file(kind)
        except QuantizeUnavailable as exc:
            skipped[kind] = str(exc)
            continue
        progress(f"{kind}: {path}")
        found += [Case(kind, kv, path) for kv in KV_TYPES]
    f32 = cached_gguf(MODELS / "target", "f32")
    draft = cached_gguf(MODELS / "draft", "f32")
    head = cached_eagle3_gguf(MODELS / "target", MODELS / "eagle3", "f32")
    mtp = cached_mtp_gguf(MODELS / "target", MODELS / "mtp", "f32")
    drafting = ("--spec-type", "draft-simple", "-md", str(draft))
    found.append(Case("f32 + draft", "q8_0", f32, drafting, 2048, 2, estimate={"draft": draft}))
    eagle3 = ("--spec-type", "draft-eagle3", "-md", str(head))
    found.append(Case("f32 + eagle3", "f16", f32, eagle3, 2048, 1, estimate={"head": head}))
    found.append(Case("mtp", "f16", mtp, ("--spec-type", "draft-mtp"), 8192, 1))
    sliding = sliding_mtp_file(mtp)
    found.append(Case("mtp swa128", "f16", sliding, ("--spec-type", "draft-mtp"), 4096, 4))
    found.append(Case("mtp swa128 split", "f16", sliding, ("--spec-type", "draft-mtp"), 4096, 4, False))
    progress("writing the Qwen3-4B-shaped synthetic file (once)")
    synthetic = qwen3_4b_like(f32)
    found += [Case("qwen3-4b-like", kv, synthetic, (), 16384, 1) for kv in KV_TYPES]
    return found, skipped


def row(case: Case, memory: GgufMemory, reported: dict[str, float]) -> dict[str, Any]:
    """One table row: estimated and reported MiB and their ratio per buffer kind."""
    mine = {"weights": memory.weights_bytes, "kv": memory.kv_bytes, "compute": memory.compute_bytes}
    slots = f"{case.slots}" + (" -kvu" if case.unified and case.slots > 1 else "")
    out: dict[str, Any] = {"case": case.name, "kv_type": case.kv, "context": case.context, "slots": slots}
    for kind in MEASURED:
        est, rep = mine[kind] / MIB, reported.get(kind, 0.0)
        out[kind] = {"estimated": est, "reported": rep, "ratio": est / rep if rep else None}
    return out


def run_gguf_memory_bench(binary: LlamaBinary, threads: int = 2, progress: Callable[[str], None] = print) -> dict:
    """Measure every case; the report's rows and the skipped cases with reasons."""
    found, skipped = cases(progress)
    rows = []
    for case in found:
        progress(f"{case.name} / KV {case.kv}: -c {case.context} -np {case.slots}")
        rows.append(row(case, estimated(case), measure(binary, case, threads)))
    return {"binary": str(binary.path), "rows": rows, "skipped": skipped}


def render(report: dict[str, Any]) -> None:
    """One rich table: per case, estimated / reported MiB and the ratio for weights, KV and compute."""
    from rich.table import Table

    from runners.report import table_console

    console = table_console()
    table = Table(title="llama-server buffers: estimated (serving.gguf_memory) / reported (its load lines), MiB")
    for col in ("file", "KV", "-c", "-np", *(f"{k} est/rep (ratio)" for k in MEASURED)):
        table.add_column(col, justify="left" if col in ("file", "KV") else "right")
    for r in report["rows"]:
        cells = []
        for kind in MEASURED:
            m = r[kind]
            ratio = f"{m['ratio']:.3f}" if m["ratio"] is not None else "-"
            cells.append(f"{m['estimated']:.2f} / {m['reported']:.2f} ({ratio})")
        table.add_row(r["case"], r["kv_type"], str(r["context"]), r["slots"], *cells)
    for name, why in report["skipped"].items():
        table.add_row(name, "-", "-", "-", f"skipped: {why}", "", "")
    console.print(table)
    console.print(f"[dim]{report['binary']} · -lv 4 -nr · ratio = estimated / reported[/]")


def add_parser(sub: Any) -> None:
    """`python -m bench gguf-memory`'s arguments (bench/__main__.py registers it)."""
    cmd = sub.add_parser(
        "gguf-memory",
        help="serving.gguf_memory's estimate vs llama-server's reported weights / KV / compute buffers",
        description="Estimated vs reported weights, KV and compute buffer MiB per file type x KV type, the drafters "
        "and a Qwen3-4B-shaped synthetic file.",
    )
    cmd.add_argument("--binary", help="llama-server to measure (default: the pinned build)")
    cmd.add_argument("--threads", type=int, default=2, help="server threads (default 2)")
    cmd.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def main(args: Any) -> int:
    """Run the benchmark for parsed `args`; 2 with one line when the binary or a file is missing."""
    import json
    import sys

    from serving.llama_binary import LlamaServerMissing, find_llama_server
    from serving.llama_server import LlamaServerError

    def note(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        report = run_gguf_memory_bench(find_llama_server(args.binary), args.threads, note)
    except (LlamaServerMissing, LlamaServerError, FileNotFoundError, RuntimeError, ValueError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        render(report)
    return 0
