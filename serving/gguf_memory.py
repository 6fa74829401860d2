"""What llama-server allocates for a GGUF configuration: weights, KV cache, compute and output buffers.

    python -m serving.gguf_memory FILE.gguf -c 8192 -ctk q8_0 -ctv q8_0 [--draft F.gguf] [--head F.gguf] \
        [--slots N] [--ceiling-gib 8]

Every fact comes from the files' headers (serving.gguf_file), every rule from how the pinned llama-server
sizes its buffers, measured on its own load lines (`reported_sizes` reads them; bench/gguf_memory.py prints
the comparison). Non-goals: which device each buffer lands on (a GPU keeps token_embd on the host; everything
here is counted once, as if all of it sat in VRAM), flash attention off (the server's `-fa auto` turns it on
wherever the device supports it, and quantised V needs it), and `-ub` other than the default except as given.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from common.units import GIB
from serving.gguf_file import GgufError, GgufInfo, read_gguf, scan

MIB = 1 << 20
N_UBATCH = 512  # llama-server's -ub default: the rows of the largest graph it reserves compute buffers for
CELL_PAD = 256  # the server pads every KV cache (full and sliding-window) to a multiple of 256 cells

# The -ctk/-ctv (and -ctkd/-ctvd) types llama-server accepts -> (values per block, bytes per block), from
# ggml's block layouts: q8_0 is a half scale + 32 int8 = 34 bytes per 32 values, q4_0 a half + 16 bytes of
# nibbles = 18, q4_1 two halves + 16 = 20, q5_0 a half + 4 bytes of high bits + 16 = 22, q5_1 24, iq4_nl 18.
KV_BLOCKS: dict[str, tuple[int, int]] = {
    "f32": (1, 4),
    "f16": (1, 2),
    "bf16": (1, 2),
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_1": (32, 20),
    "iq4_nl": (32, 18),
    "q5_0": (32, 22),
    "q5_1": (32, 24),
}
KV_TYPES: dict[str, float] = {name: size / block for name, (block, size) in KV_BLOCKS.items()}  # bytes per value

# Architectures whose sliding-window layout llama.cpp hard-codes instead of reading a pattern from the file
# (llama_hparams::set_swa_pattern(n): layer il slides when il % n < n - 1). Not measured here (no such file is
# bundled). A file that carries <arch>.attention.sliding_window_pattern is read as it says (measured on mimo2:
# a non-zero entry is a sliding layer); llama and qwen3 ignore sliding-window keys altogether (measured).
_HARD_CODED_SWA = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "gpt-oss": 2}


def kv_row_bytes(cache_type: str, values: int) -> int:
    """Bytes of `values` cache values (one K or V row) stored as `cache_type`; ValueError naming the allowed."""
    if cache_type not in KV_BLOCKS:
        raise ConfigError(f"unknown KV cache type {cache_type!r}; llama-server allows: {', '.join(KV_BLOCKS)}")
    block, size = KV_BLOCKS[cache_type]
    if values % block:
        raise ConfigError(f"a {cache_type} row holds a multiple of {block} values, not {values}")
    return values // block * size


@dataclass(frozen=True)
class PartMemory:
    """One model or llama_context of the server: the target, a draft model, an EAGLE-3 head, MTP layers."""

    role: str  # target | draft | head | mtp (the target file's own MTP layers in their own context)
    weights_bytes: int  # tensors the role adds (0 for mtp: its layers are part of the target's file)
    kv_bytes: int  # its KV cache, every layer it holds at its cache types
    state_bytes: int  # recurrent state (linear-attention layers hold this instead of KV), per slot
    compute_bytes: int  # the context's compute buffer (the largest graph it reserves, n_ubatch rows)
    output_bytes: int  # logits buffer: one row of vocabulary floats per slot
    cells: int  # KV cells of a full-attention layer, per stream
    swa_cells: int  # KV cells of a sliding-window layer, per stream (0: none)

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.state_bytes + self.compute_bytes + self.output_bytes


@dataclass(frozen=True)
class GgufMemory:
    """The server's buffers for one configuration (bytes), whole and per part."""

    context: int  # -c as the server resolves it (0 -> the model's trained context)
    slots: int  # -np
    streams: int  # KV streams: 1 with a unified pool (--kv-unified, or one slot), else one per slot
    parts: tuple[PartMemory, ...]
    weights_bytes: int
    kv_bytes: int  # KV caches and recurrent state
    compute_bytes: int
    output_bytes: int
    total_bytes: int

    def part(self, role: str) -> PartMemory | None:
        return next((p for p in self.parts if p.role == role), None)

    def describe(self) -> str:
        """A table in MiB, one row per part and the total."""
        head = f"{'part':<8}{'weights':>10}{'KV':>10}{'compute':>10}{'output':>9}{'total':>10}   cells"
        rows = [head]
        for p in self.parts:
            cells = f"{p.cells} x{self.streams}" + (f", sliding {p.swa_cells}" if p.swa_cells else "")
            kv = p.kv_bytes + p.state_bytes
            rows.append(
                f"{p.role:<8}{p.weights_bytes / MIB:>10.2f}{kv / MIB:>10.2f}{p.compute_bytes / MIB:>10.2f}"
                f"{p.output_bytes / MIB:>9.2f}{p.total_bytes / MIB:>10.2f}   {cells}"
            )
        rows.append(
            f"{'total':<8}{self.weights_bytes / MIB:>10.2f}{self.kv_bytes / MIB:>10.2f}"
            f"{self.compute_bytes / MIB:>10.2f}{self.output_bytes / MIB:>9.2f}{self.total_bytes / MIB:>10.2f}"
        )
        return "\n".join(rows)


@dataclass(frozen=True)
class _Shape:
    """Facts GgufInfo leaves out, read from the same header."""

    n_ff: int  # the widest FFN row a token goes through (MoE: the experts it uses, shared ones included)
    output_rows: int  # rows of output.weight (an EAGLE-3 head's draft vocabulary), else the vocabulary
    swa: tuple[bool, ...]  # per layer: a sliding-window layer
    n_swa: int
    recurrent: tuple[bool, ...]  # per layer: linear attention (recurrent state, no KV)
    state_floats: int  # recurrent state floats per layer and sequence (llama.cpp's n_embd_r + n_embd_s)


@lru_cache(maxsize=32)
def _file_facts(path: Path, arch: str, vocab: int, stamp: int) -> tuple[int, int, int]:
    """(n_ff, output rows, recurrent state floats per layer and sequence) from the file's header."""
    names = (
        "feed_forward_length",
        "expert_count",
        "expert_used_count",
        "expert_feed_forward_length",
        "expert_shared_feed_forward_length",
        "ssm.conv_kernel",
        "ssm.inner_size",
        "ssm.state_size",
        "ssm.group_count",
    )
    header = scan(path)
    values = {k: v for k, v in header.values.items() if k in {f"{arch}.{name}" for name in names}}
    shapes = {name: list(shape) for name, (shape, _) in header.tensors.items()}

    def key(name: str) -> Any:
        return values.get(f"{arch}.{name}", 0)

    ff = key("feed_forward_length")
    n_ff = max(ff) if isinstance(ff, list) else int(ff)
    if int(key("expert_count")):  # unvalidated: no mixture-of-experts file here
        used = int(key("expert_used_count")) * int(key("expert_feed_forward_length"))
        n_ff = max(n_ff, used + int(key("expert_shared_feed_forward_length")))
    output = shapes.get("output.weight", [])
    output_rows = int(output[1]) if len(output) > 1 else vocab
    # llama.cpp's n_embd_r + n_embd_s: a linear-attention layer's convolution and recurrent state floats
    d_conv, d_inner = int(key("ssm.conv_kernel")), int(key("ssm.inner_size"))
    d_state, groups = int(key("ssm.state_size")), int(key("ssm.group_count"))
    conv = (d_conv - 1) * (d_inner + 2 * groups * d_state) if d_conv else 0
    return n_ff, output_rows, conv + d_state * d_inner


def _shape(info: GgufInfo) -> _Shape:
    try:
        stamp = info.path.stat().st_mtime_ns
    except OSError as exc:
        raise GgufError(f"{info.path}: cannot read its header ({exc.strerror})") from None
    n_ff, output_rows, state = _file_facts(info.path, info.architecture, info.vocab_size, stamp)
    n = info.n_layer
    n_swa = int(info.extra.get("attention.sliding_window") or 0)
    pattern = info.extra.get("attention.sliding_window_pattern", _HARD_CODED_SWA.get(info.architecture))
    if not n_swa or pattern is None:
        swa = (False,) * n
    elif isinstance(pattern, list):
        swa = tuple(bool(pattern[il]) if il < len(pattern) else False for il in range(n))
    else:
        swa = tuple(int(pattern) == 0 or il % int(pattern) < int(pattern) - 1 for il in range(n))
    # Hybrid files: llama.cpp gives a layer no KV when its head_count_kv is 0 or, with full_attention_interval
    # k (qwen3next/qwen35), when (il + 1) % k != 0; those layers keep a recurrent state per sequence instead
    # (unvalidated: no hybrid file here).
    heads = _heads(info)
    interval = int(info.extra.get("full_attention_interval") or 0)
    recurrent = tuple(heads[il] == 0 or (interval > 0 and (il + 1) % interval != 0) for il in range(n))
    return _Shape(n_ff, output_rows, swa, n_swa, recurrent, state if any(recurrent) else 0)


def _heads(info: GgufInfo) -> tuple[int, ...]:
    if len(info.n_head_kv) == info.n_layer:
        return info.n_head_kv
    return (info.n_head_kv[0] if info.n_head_kv else info.n_head,) * info.n_layer


def _pad(n: int, to: int = CELL_PAD) -> int:
    return -(-n // to) * to


def _kv(info: GgufInfo, layers: range, cells: int, swa_cells: int, streams: int, ctk: str, ctv: str) -> int:
    """KV bytes of `layers` of `info` (recurrent ones hold none), sliding ones at `swa_cells`."""
    shape, heads = _shape(info), _heads(info)
    total = 0
    for il in layers:
        if shape.recurrent[il]:
            continue
        row = kv_row_bytes(ctk, heads[il] * info.key_length) + kv_row_bytes(ctv, heads[il] * info.value_length)
        total += row * (swa_cells if shape.swa[il] else cells) * streams
    return total


def _masks(info: GgufInfo, layers: range, cells: int, swa_cells: int) -> int:
    """Cells the attention masks of a context span: one mask per cache (full, sliding) with a layer in it."""
    shape = _shape(info)
    held = [il for il in layers if not shape.recurrent[il]]
    full = any(not shape.swa[il] for il in held)
    sliding = any(shape.swa[il] for il in held)
    return (cells if full else 0) + (swa_cells if sliding else 0)


# Compute buffers: llama.cpp reserves, per context, the graph of one n_ubatch-row batch; the allocator reuses
# memory, so the buffer is that graph's peak of live tensors, all proportional to the rows. Fitted to the
# server's own `compute buffer size` lines (flash attention on, CPU backend) over llama and qwen3 files from
# 256x704 to 5120x17408 (embedding x FFN), vocabularies 8k-152k, 1k-32k cells, 1-4 slots, f16 and q8_0 KV:
#   trunk (target, draft model): rows x (4 x (3 n_ff + 5 n_embd) + 2 x mask cells)  -- within 2%
# (the FFN's gate, up and their product in f32, five embedding-wide rows around them, and an f16 mask row per
# cached cell of each cache the context attends to; vocabulary and head counts do not enter: the logits are
# taken for one row per slot only, and the last layer runs on those rows alone).
#   EAGLE-3 head: rows x 8 x (draft vocabulary + n_embd)  -- its graph keeps logits for every row, twice
#   MTP layers: rows x max(16 n_ff, 4 (n_ff + 2 n_embd) + 2 x mask cells)
# The last two are fitted on the one head and one MTP file bundled (one shape each), so the split between
# their terms is a guess; a GPU backend's buffers (CUDA0 plus a CUDA_Host one) may differ from the CPU's.
def _trunk_compute(info: GgufInfo, mask_cells: int, rows: int) -> int:
    return rows * (4 * (3 * _shape(info).n_ff + 5 * info.n_embd) + 2 * mask_cells)


def _head_compute(info: GgufInfo, rows: int) -> int:
    return rows * 8 * (_shape(info).output_rows + info.n_embd)


def _mtp_compute(info: GgufInfo, mask_cells: int, rows: int) -> int:
    n_ff = _shape(info).n_ff
    return rows * max(16 * n_ff, 4 * (n_ff + 2 * info.n_embd) + 2 * mask_cells)


def estimate(
    target: GgufInfo,
    *,
    context: int,
    slots: int = 1,
    cache_type_k: str = "f16",
    cache_type_v: str = "f16",
    draft: GgufInfo | None = None,
    head: GgufInfo | None = None,
    draft_context: int | None = None,
    mtp: bool | None = None,
    draft_cache_type_k: str = "f16",
    draft_cache_type_v: str = "f16",
    kv_unified: bool = True,
    n_ubatch: int = N_UBATCH,
) -> GgufMemory:
    """The buffers of `llama-server -m TARGET -c CONTEXT -np SLOTS -ctk K -ctv V` (with `--kv-unified` when
    `kv_unified`, as spectune's exports write it for several slots; without it each slot gets CONTEXT/SLOTS),
    plus a draft model (`-md`, its own context of `draft_context`, default CONTEXT), an EAGLE-3 head, or the
    target's own MTP layers (`mtp`; default: when the file has them and no other drafter is given). Drafters'
    caches use -ctkd/-ctvd (`draft_cache_type_*`), which llama-server leaves at f16 whatever -ctk says."""
    if slots < 1 or context < 0:
        raise ValueError(f"slots must be >= 1 and context >= 0, got slots={slots}, context={context}")
    for name in (cache_type_k, cache_type_v, draft_cache_type_k, draft_cache_type_v):
        kv_row_bytes(name, 0)
    streams = 1 if kv_unified or slots == 1 else slots
    seqs_in_window = slots if streams == 1 else 1  # a unified sliding cache holds every slot's window

    def cells_for(ctx: int, info: GgufInfo) -> tuple[int, int]:
        # -c is the whole pool; without --kv-unified the server rounds it down to a multiple of the slots and
        # gives each its share; either way a stream's cells pad to 256. A sliding layer keeps its window for
        # each sequence it may hold, plus one batch, padded likewise (llama_kv_cache_iswa).
        cells = _pad(max(ctx // streams, 1))
        n_swa = _shape(info).n_swa
        swa = _pad(min(cells, n_swa * seqs_in_window + n_ubatch)) if any(_shape(info).swa) else 0
        return cells, swa

    context = context or target.context_length
    parts = []
    trunk = range(target.n_layer - target.nextn_layers)  # llama.cpp keeps MTP layers out of the trunk's cache
    cells, swa = cells_for(context, target)
    parts.append(
        PartMemory(
            "target",
            target.weight_bytes,
            _kv(target, trunk, cells, swa, streams, cache_type_k, cache_type_v),
            _state(target, trunk, slots),
            _trunk_compute(target, _masks(target, trunk, cells, swa), n_ubatch),
            slots * target.vocab_size * 4,
            cells,
            swa,
        )
    )
    if mtp is None:
        mtp = target.nextn_layers > 0 and draft is None and head is None
    if mtp and target.nextn_layers:
        layers = range(target.n_layer - target.nextn_layers, target.n_layer)
        kv = _kv(target, layers, cells, swa, streams, draft_cache_type_k, draft_cache_type_v)
        compute = _mtp_compute(target, _masks(target, layers, cells, swa), n_ubatch)
        parts.append(PartMemory("mtp", 0, kv, 0, compute, slots * target.vocab_size * 4, cells, swa))
    for role, info in (("draft", draft), ("head", head)):
        if info is None:
            continue
        d_cells, d_swa = cells_for(draft_context or context, info)
        layers = range(info.n_layer - info.nextn_layers)
        kv = _kv(info, layers, d_cells, d_swa, streams, draft_cache_type_k, draft_cache_type_v)
        if role == "head":
            compute = _head_compute(info, n_ubatch)
        else:
            compute = _trunk_compute(info, _masks(info, layers, d_cells, d_swa), n_ubatch)
        output = slots * _shape(info).output_rows * 4
        parts.append(
            PartMemory(role, info.weight_bytes, kv, _state(info, layers, slots), compute, output, d_cells, d_swa)
        )
    return GgufMemory(
        context=context,
        slots=slots,
        streams=streams,
        parts=tuple(parts),
        weights_bytes=sum(p.weights_bytes for p in parts),
        kv_bytes=sum(p.kv_bytes + p.state_bytes for p in parts),
        compute_bytes=sum(p.compute_bytes for p in parts),
        output_bytes=sum(p.output_bytes for p in parts),
        total_bytes=sum(p.total_bytes for p in parts),
    )


def _state(info: GgufInfo, layers: range, slots: int) -> int:
    """Recurrent state (f32) of the linear-attention layers among `layers`, one per slot."""
    shape = _shape(info)
    return sum(shape.state_floats * 4 * slots for il in layers if shape.recurrent[il])


def largest_context(
    target: GgufInfo,
    ceiling_bytes: int,
    *,
    slots: int = 1,
    cache_type_k: str = "f16",
    cache_type_v: str = "f16",
    draft: GgufInfo | None = None,
    head: GgufInfo | None = None,
    overhead_bytes: int = 0,
    max_context: int | None = None,
    **options: Any,
) -> int:
    """The largest -c (up to `max_context`, default the model's trained context) whose `estimate` total plus
    `overhead_bytes` fits `ceiling_bytes`; 0 when not even one padded step fits. The answer is a whole step
    (256 cells per stream), so `estimate` at it fits and one step more does not (unless capped)."""
    limit = max_context or target.context_length or 1 << 20
    streams = 1 if options.get("kv_unified", True) or slots == 1 else slots
    step = CELL_PAD * streams

    def fits(ctx: int) -> bool:
        kwargs = dict(slots=slots, cache_type_k=cache_type_k, cache_type_v=cache_type_v, draft=draft, head=head)
        found = estimate(target, context=ctx, **kwargs, **options)
        return found.total_bytes + overhead_bytes <= ceiling_bytes

    low, high = 0, -(-limit // step)  # in steps: fits(low * step) holds (or low == 0), high is the cap
    if fits(high * step):
        return limit
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid * step) else (low, mid)
    return low * step


# llama-server's load lines (printed at -lv 4 or --verbose; the default verbosity hides them), e.g.
#   load_tensors:   CPU_Mapped model buffer size =    19.26 MiB
#   llama_context:        CPU  output buffer size =     0.12 MiB
#   llama_kv_cache: size =    8.00 MiB (  4096 cells,   4 layers,  4/1 seqs), K (f16): ...
#   sched_reserve:        CPU compute buffer size =    10.64 MiB
_MODEL = re.compile(r"(\S+) model buffer size =\s*([\d.]+) MiB")
_KV = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB")
_RS = re.compile(r"(\S+) RS buffer size =\s*([\d.]+) MiB")
_COMPUTE = re.compile(r"(\S+) compute buffer size =\s*([\d.]+) MiB")
_OUTPUT = re.compile(r"(\S+)\s+output buffer size =\s*([\d.]+) MiB")
KINDS = ("weights", "kv", "compute", "output")


def reported_sizes(log_text: str) -> dict[str, float]:
    """What llama-server says it allocated, in MiB: `weights`, `kv` (caches and recurrent state), `compute`,
    `output`, `total`, and the same per role as `target.kv`, `draft.compute`, ... Roles follow the load order:
    the first model is the target, a later one a draft (`head` when llama.cpp loads it as EAGLE-3), and a second
    context on an already loaded model its MTP layers (`mtp`). A context's compute buffer is the largest it
    reports per backend (the server reserves again after loading a drafter; buffers only grow)."""
    sizes: dict[str, float] = {}
    models: list[str] = []  # role of each loaded model
    with_context: set[int] = set()  # models that have a context already
    role = "target"
    compute: dict[tuple[str, str, int], float] = {}
    n_context = 0

    def add(kind: str, value: float) -> None:
        for name in (kind, f"{role}.{kind}"):
            sizes[name] = sizes.get(name, 0.0) + value

    for line in log_text.splitlines():
        if "llama_model_loader: loaded meta data" in line:
            models.append("target" if not models else "draft")
            role = models[-1]
        elif "EAGLE3" in line and models and len(models) > 1:
            models[-1] = role = "head"
        elif "llama_context: constructing llama_context" in line:
            n_context += 1
            model = len(models) - 1
            role = "mtp" if model in with_context else (models[model] if models else "target")
            with_context.add(model)
        elif found := _MODEL.search(line):
            add("weights", float(found.group(2)))
        elif found := _KV.search(line):
            add("kv", float(found.group(1)))
        elif found := _RS.search(line):
            add("kv", float(found.group(2)))
        elif found := _OUTPUT.search(line):
            add("output", float(found.group(2)))
        elif found := _COMPUTE.search(line):
            slot = (role, found.group(1), n_context)
            compute[slot] = max(compute.get(slot, 0.0), float(found.group(2)))
    for (owner, _, _), value in compute.items():
        for name in ("compute", f"{owner}.compute"):
            sizes[name] = sizes.get(name, 0.0) + value
    sizes["total"] = sum(sizes.get(kind, 0.0) for kind in KINDS)
    return sizes


def main(argv: list[str] | None = None) -> int:
    """Command line: the breakdown at -c and the largest context under the ceiling."""
    parser = argparse.ArgumentParser(prog="python -m serving.gguf_memory", description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the target GGUF")
    parser.add_argument("-c", "--ctx-size", type=int, default=0, help="-c as given to llama-server (0: trained)")
    parser.add_argument("-ctk", "--cache-type-k", default="f16", choices=KV_BLOCKS, help="K cache type")
    parser.add_argument("-ctv", "--cache-type-v", default="f16", choices=KV_BLOCKS, help="V cache type")
    parser.add_argument("-ctkd", "--cache-type-k-draft", default="f16", choices=KV_BLOCKS, help="drafter K type")
    parser.add_argument("-ctvd", "--cache-type-v-draft", default="f16", choices=KV_BLOCKS, help="drafter V type")
    parser.add_argument("--draft", help="a draft model GGUF (-md)")
    parser.add_argument("--head", help="an EAGLE-3 head GGUF (--spec-type draft-eagle3 -md)")
    parser.add_argument("--no-mtp", action="store_true", help="leave the file's MTP layers' context out")
    parser.add_argument("--slots", "-np", type=int, default=1, help="-np (default 1)")
    parser.add_argument("--no-kv-unified", action="store_true", help="each slot gets -c / slots (no --kv-unified)")
    parser.add_argument("--ceiling-gib", type=float, default=8.0, help="memory ceiling in GiB (default 8)")
    parser.add_argument("--overhead-mib", type=float, default=0.0, help="held back from the ceiling (MiB)")
    args = parser.parse_args(argv)
    try:
        target = read_gguf(args.model)
        draft = read_gguf(args.draft) if args.draft else None
        head = read_gguf(args.head) if args.head else None
        options: dict[str, Any] = dict(
            slots=args.slots,
            cache_type_k=args.cache_type_k,
            cache_type_v=args.cache_type_v,
            draft=draft,
            head=head,
            mtp=False if args.no_mtp else None,
            draft_cache_type_k=args.cache_type_k_draft,
            draft_cache_type_v=args.cache_type_v_draft,
            kv_unified=not args.no_kv_unified,
        )
        memory = estimate(target, context=args.ctx_size, **options)
        ceiling = int(args.ceiling_gib * GIB)
        largest = largest_context(target, ceiling, overhead_bytes=int(args.overhead_mib * MIB), **options)
    except (GgufError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(target.describe())
    print(f"-c {memory.context} -np {memory.slots} -ctk {args.cache_type_k} -ctv {args.cache_type_v} (MiB):")
    print(memory.describe())
    print(
        f"largest -c under {args.ceiling_gib:g} GiB: {largest}"
        + (f" (the trained context {target.context_length} fits)" if largest >= target.context_length else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
