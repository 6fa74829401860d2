"""serving/gguf_memory.py: KV arithmetic per cache type, the refusals, largest_context, the log parser, and the
estimate against what the pinned llama-server reports when it loads the bundled files (f32, q8_0, q4_k_m when
serving.quantize and llama-quantize exist; f16 and q8_0 KV), the drafters and a Qwen3-4B-shaped synthetic file.

The arithmetic runs on small synthetic GGUF headers (bench/gguf_memory.py writes them; no binary needed). The
real-binary tests skip without the pinned build and fail instead under SPECTUNE_REQUIRE_LLAMA=1
(tests/serving/conftest.py); every server runs as `python -m bench gguf-memory` starts it (-lv 4 -nr).
"""

from __future__ import annotations

import dataclasses

import pytest

from bench import gguf_memory as bench
from serving.gguf_file import read_gguf
from serving.gguf_memory import (
    CELL_PAD,
    KV_BLOCKS,
    KV_TYPES,
    MIB,
    estimate,
    kv_row_bytes,
    largest_context,
    main,
    reported_sizes,
)
from tests.serving.conftest import REQUIRED

SHAPE = {"n_layer": 3, "n_embd": 256, "n_ff": 768, "n_head": 4, "n_head_kv": 2, "head_dim": 64}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A 3-layer qwen3 header: 2 KV heads of 64 values for K and V per layer, trained context 40960."""
    out = tmp_path_factory.mktemp("gguf-memory") / "small.gguf"
    return read_gguf(bench.synthetic_gguf(out, None, vocab=512, **SHAPE))


# ---- arithmetic, no binary ----------------------------------------------------------------------------------------


def test_kv_types_are_llama_servers_with_ggmls_block_sizes():
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    assert list(KV_TYPES) == ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"]
    for name, (block, size) in KV_BLOCKS.items():
        assert GGML_QUANT_SIZES[GGMLQuantizationType[name.upper()]] == (block, size), name
        assert KV_TYPES[name] == size / block
    assert kv_row_bytes("q8_0", 128) == 4 * 34 and kv_row_bytes("f16", 128) == 256 and kv_row_bytes("q5_1", 64) == 48


@pytest.mark.parametrize("kind", list(KV_TYPES))
def test_kv_bytes_are_layers_times_cells_times_heads_times_type(small, kind):
    memory = estimate(small, context=1000, cache_type_k=kind, cache_type_v="f16")
    cells = 1024  # -c 1000 padded to 256
    per_cell = SHAPE["n_layer"] * SHAPE["n_head_kv"] * SHAPE["head_dim"] * (KV_TYPES[kind] + 2)
    assert memory.kv_bytes == cells * per_cell, f"{kind}: {memory.kv_bytes} != {cells} cells x {per_cell} B"
    assert memory.weights_bytes == small.weight_bytes
    assert (
        memory.total_bytes
        == sum(p.total_bytes for p in memory.parts)
        == (memory.weights_bytes + memory.kv_bytes + memory.compute_bytes + memory.output_bytes)
    )


def test_slots_share_the_pool_unified_or_split(small):
    one = estimate(small, context=8192)
    unified = estimate(small, context=8192, slots=4)
    split = estimate(small, context=8192, slots=4, kv_unified=False)
    assert one.kv_bytes == unified.kv_bytes == split.kv_bytes  # -c is the whole pool either way
    assert (unified.streams, unified.parts[0].cells) == (1, 8192) and (split.streams, split.parts[0].cells) == (4, 2048)
    assert split.compute_bytes < unified.compute_bytes  # each stream's mask spans its share only
    assert estimate(small, context=1000, slots=3, kv_unified=False).parts[0].cells == 512  # 333 padded to 256


def test_mtp_layers_sit_outside_the_trunk_and_drafters_use_their_own_f16_cache(small):
    mtp = dataclasses.replace(small, nextn_layers=1)
    memory = estimate(mtp, context=4096, cache_type_k="q8_0", cache_type_v="q8_0")
    per_layer = 4096 * SHAPE["n_head_kv"] * SHAPE["head_dim"]
    assert memory.part("target").kv_bytes == 2 * per_layer * 2 * 34 // 32  # two trunk layers at q8_0
    assert memory.part("mtp").kv_bytes == per_layer * 2 * 2  # the MTP layer at -ctkd/-ctvd f16
    assert estimate(mtp, context=4096, mtp=False).part("mtp") is None
    drafted = estimate(small, context=4096, cache_type_k="q4_0", cache_type_v="q4_0", draft=small)
    assert drafted.part("draft").kv_bytes == 3 * per_layer * 2 * 2
    assert drafted.weights_bytes == 2 * small.weight_bytes


def test_an_unknown_cache_type_names_the_allowed_ones(small):
    with pytest.raises(ValueError) as err:
        estimate(small, context=4096, cache_type_k="q3_k")
    assert "'q3_k'" in str(err.value) and "f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1" in str(err.value)
    with pytest.raises(ValueError, match="allows"):
        largest_context(small, 8 << 30, cache_type_v="fp8")


def test_largest_context_is_monotone_and_consistent_with_estimate(small):
    floor = estimate(small, context=CELL_PAD).total_bytes
    found = []
    for ceiling in range(floor - 1, floor + 40 * MIB, 3 * MIB):
        largest = largest_context(small, ceiling, overhead_bytes=MIB)
        found.append(largest)
        if largest == 0:
            assert estimate(small, context=CELL_PAD).total_bytes + MIB > ceiling
            continue
        assert estimate(small, context=largest).total_bytes + MIB <= ceiling, (ceiling, largest)
        if largest < small.context_length:
            assert estimate(small, context=largest + CELL_PAD).total_bytes + MIB > ceiling, (ceiling, largest)
    assert found == sorted(found) and found[0] == 0 and found[-1] > 0
    assert largest_context(small, 1 << 40) == small.context_length


def test_the_command_line_prints_the_breakdown_and_the_largest_context(small, capsys):
    assert main([str(small.path), "-c", "8192", "-ctk", "q8_0", "-ctv", "q8_0", "--slots", "2"]) == 0
    out = capsys.readouterr().out
    assert "target" in out and "total" in out and "largest -c under 8 GiB: 40960" in out
    with pytest.raises(SystemExit):  # argparse refuses a type llama-server does not take, listing the choices
        main([str(small.path), "-ctk", "q3"])


# ---- the log parser -----------------------------------------------------------------------------------------------

# Lines of a real log of the pinned release (-lv 4, target + EAGLE-3 head, -c 2048 -np 1), trimmed.
LOG = """\
0.00.045.852 I llama_model_loader: loaded meta data with 27 key-value pairs and 38 tensors from target.gguf
0.00.072.291 I load_tensors:   CPU_Mapped model buffer size =    19.26 MiB
0.00.072.967 I llama_context: constructing llama_context
0.00.073.002 I llama_context:        CPU  output buffer size =     0.03 MiB
0.00.073.086 I llama_kv_cache:        CPU KV buffer size =     4.00 MiB
0.00.077.935 I llama_kv_cache: size =    4.00 MiB (  2048 cells,   4 layers,  1/1 seqs), K (f16):    2.00 MiB
0.00.079.852 I sched_reserve:        CPU compute buffer size =     8.64 MiB
0.00.090.001 I llama_model_loader: loaded meta data with 31 key-value pairs and 13 tensors from eagle3.gguf
0.00.090.002 I load_arch_hparams: EAGLE3 extract_layers = [1, 2, 3]
0.00.090.003 I load_tensors:   CPU_Mapped model buffer size =    12.07 MiB
0.00.090.004 I llama_context: constructing llama_context
0.00.090.005 I llama_context:        CPU  output buffer size =     0.03 MiB
0.00.090.006 I llama_kv_cache: size =    1.00 MiB (  2048 cells,   1 layers,  1/1 seqs), K (f16):    0.50 MiB
0.00.090.007 I sched_reserve:        CPU compute buffer size =    17.00 MiB
0.00.090.008 I srv    load_model: initializing, n_slots = 1, n_ctx_slot = 2048, kv_unified = 'false'
0.00.090.009 I sched_reserve:        CPU compute buffer size =    33.03 MiB
"""


def test_reported_sizes_reads_each_buffer_per_role():
    sizes = reported_sizes(LOG)
    assert sizes["weights"] == pytest.approx(31.33) and sizes["target.weights"] == pytest.approx(19.26)
    assert sizes["kv"] == pytest.approx(5.0) and sizes["head.kv"] == pytest.approx(1.0)
    assert sizes["target.compute"] == pytest.approx(8.64) and sizes["head.compute"] == pytest.approx(33.03)
    assert sizes["compute"] == pytest.approx(41.67) and sizes["output"] == pytest.approx(0.06)
    assert sizes["total"] == pytest.approx(31.33 + 5.0 + 41.67 + 0.06)
    assert reported_sizes("no load lines here") == {"total": 0.0}


# ---- against the real server --------------------------------------------------------------------------------------


def _target(kind: str):
    try:
        return bench.target_file(kind)
    except bench.QuantizeUnavailable as exc:
        if REQUIRED and str(exc) != bench.QUANTIZE_MISSING:
            raise
        pytest.skip(str(exc))


def _check(case: bench.Case, binary, within: float = 0.10) -> dict[str, float]:
    reported = bench.measure(binary, case)
    row = bench.row(case, bench.estimated(case), reported)
    for kind in bench.MEASURED:
        m = row[kind]
        assert m["reported"] > 0, f"{case.name}: the server reported no {kind} buffer ({reported})"
        assert abs(m["ratio"] - 1) <= within, (
            f"{case.name} KV {case.kv}: {kind} estimated {m['estimated']:.2f} MiB vs reported {m['reported']:.2f}"
        )
    return reported


@pytest.mark.parametrize("kv", bench.KV_TYPES)
@pytest.mark.parametrize("kind", bench.FILE_TYPES)
def test_the_estimate_is_within_10_percent_of_what_the_server_reports(binary, kind, kv):
    _check(bench.Case(kind, kv, _target(kind)), binary)


def test_the_drafters_are_within_10_percent_of_what_the_server_reports(binary):
    from serving.eagle3_gguf import cached_eagle3_gguf
    from serving.gguf import cached_gguf
    from serving.mtp_gguf import cached_mtp_gguf

    target, draft = _target("f32"), cached_gguf(bench.MODELS / "draft", "f32")
    head = cached_eagle3_gguf(bench.MODELS / "target", bench.MODELS / "eagle3", "f32")
    mtp = cached_mtp_gguf(bench.MODELS / "target", bench.MODELS / "mtp", "f32")
    drafting = ("--spec-type", "draft-simple", "-md", str(draft))
    reported = _check(bench.Case("draft", "q8_0", target, drafting, 2048, 2, estimate={"draft": draft}), binary)
    assert reported["draft.kv"] == pytest.approx(0.5, abs=0.01)  # 2 layers x 2048 cells at f16, not q8_0
    eagle3 = ("--spec-type", "draft-eagle3", "-md", str(head))
    reported = _check(bench.Case("eagle3", "f16", target, eagle3, 2048, estimate={"head": head}), binary)
    assert set(reported) >= {"head.weights", "head.kv", "head.compute"}
    native = ("--spec-type", "draft-mtp")
    reported = _check(bench.Case("mtp", "f16", mtp, native, 8192), binary)
    assert reported["mtp.kv"] == pytest.approx(4.0, abs=0.01) and "mtp.weights" not in reported
    sliding = bench.sliding_mtp_file(mtp)  # 128-token window: the sliding caches hold window x slots + a batch
    for unified in (True, False):
        _check(bench.Case("swa", "f16", sliding, native, 4096, 4, unified), binary)


def test_a_qwen3_4b_shaped_file_is_within_10_percent_of_what_the_server_reports(binary):
    synthetic = bench.qwen3_4b_like(_target("f32"))
    reported = _check(bench.Case("qwen3-4b-like", "q8_0", synthetic, (), 16384), binary)
    assert reported["compute"] > 90  # the FFN's rows dominate: 512 x 4 x (3 x 9728 + 5 x 2560) B + the mask
