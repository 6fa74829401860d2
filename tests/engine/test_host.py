"""What this machine can run (engine/host.py) and how paths, kernels, the plan and dtypes follow it.

The host at hand is one kind; the other kind is checked by narrowing the probe ($SPECTUNE_CPU_FEATURES
takes features away): on an AVX-512 host these tests see an AVX2-only one, where oneDNN's bf16 linear
raises instead of running. On an AVX2-only host they hold as they are.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine import forward_plan
from engine.engine import Engine, EngineConfig
from engine.forward import choose_path, make_forward, path_refusal, runnable_paths
from engine.forward_plan import OverBudget, available_kernels, machine_key, measure_forwards, plan_for
from engine.host import FEATURES_ENV, cpu_flags, onednn_bf16_by_flags, probe
from engine.kernels import LinearPlan, kernel_refusal, make_linear
from engine.loading import resolve_dtype
from engine.testing import random_model

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "models" / "spectune-tiny" / "target"
AVX2 = "avx2,fma,f16c"  # the AVX2-only host of issue 35's CI failure
X86_AVX512 = """processor\t: 0
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse2 avx avx2 fma f16c avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni
"""
ARM = """processor\t: 0
Features\t: fp asimd evtstrm aes crc32 atomics fphp asimdhp bf16 sve
CPU part\t: 0xd40
"""


@pytest.fixture
def as_host(monkeypatch):
    """Run the test as a host with only the given CPU flags (the probe narrowed, then restored)."""

    def narrow(flags: str):
        monkeypatch.setenv(FEATURES_ENV, flags)
        probe.cache_clear()
        return probe()

    yield narrow
    monkeypatch.delenv(FEATURES_ENV, raising=False)
    probe.cache_clear()


def test_the_bf16_rule_is_onednns_own_gate_and_agrees_with_torch_here():
    x86 = "x86_64"
    assert not onednn_bf16_by_flags(x86, frozenset({"avx2", "fma", "f16c"}))
    assert not onednn_bf16_by_flags(x86, frozenset({"avx2", "avx512f", "avx512bw"}))  # vl and dq missing
    assert onednn_bf16_by_flags(x86, frozenset({"avx512bw", "avx512vl", "avx512dq"}))
    assert onednn_bf16_by_flags(x86, frozenset({"avx2", "avx_ne_convert"}))
    assert onednn_bf16_by_flags("aarch64", frozenset({"asimd", "bf16"}))
    assert not onednn_bf16_by_flags("aarch64", frozenset({"asimd"}))
    host = probe()
    if host.onednn and not host.narrowed:  # the rule on this CPU's flags says what torch's own check says
        assert onednn_bf16_by_flags(host.arch, host.flags) == host.onednn_bf16


def test_cpuinfo_is_read_on_x86_and_arm():
    name, flags = cpu_flags(X86_AVX512)
    assert name == "AMD EPYC 9R14 96-Core Processor"
    assert {"avx2", "avx512bw", "avx512_bf16"} <= flags and "sse2" not in flags  # only the flags that matter
    _, arm = cpu_flags(ARM)
    assert arm == {"asimd", "bf16", "sve"}


def test_narrowing_takes_features_away_and_never_adds_one(as_host):
    _, cpu = cpu_flags()  # the CPU's own flags, whatever $SPECTUNE_CPU_FEATURES this run was started with
    host = as_host(AVX2 + ",avx512_fp99")
    assert host.flags == cpu & {"avx2", "fma", "f16c"} and "avx512_fp99" not in host.flags
    assert not host.onednn_bf16 and not host.bf16_native
    assert host.narrowed == (not cpu <= {"avx2", "fma", "f16c"})
    assert "\n" not in host.describe() and host.describe().startswith(host.cpu)
    # another set of flags (or a narrowed probe) is another machine for every cache keyed by it
    wider = dataclasses.replace(host, flags=host.flags | {"avx512bw"}, narrowed=False)
    assert len({host.key(), wider.key(), dataclasses.replace(wider, narrowed=True).key()}) == 3


def test_on_an_avx2_host_auto_keeps_bf16_off_onednn_and_a_forced_onednn_is_one_line(as_host):
    host = as_host(AVX2)
    model = random_model("llama", seed=3, dtype=torch.float32, hidden=256).model.to(torch.bfloat16)
    auto = choose_path(model)
    assert auto.path == "torch"
    assert "oneDNN's bf16 linear needs avx512bw + avx512vl + avx512dq, or avx_ne_convert" in auto.reason
    assert "this CPU has avx2 fma f16c" in auto.reason
    with pytest.raises(ValueError) as refused:
        choose_path(model, "onednn")
    line = str(refused.value)
    assert "\n" not in line and line.startswith("forward path 'onednn' cannot run bfloat16 here: oneDNN's bf16")
    assert line.endswith("(paths that run here: auto, transformers, torch, mixed)")
    assert path_refusal("onednn", "cpu", torch.bfloat16) == host.lacks_for_onednn_bf16()
    if host.onednn:  # fp32 through oneDNN needs no AVX-512: still offered
        assert path_refusal("onednn", "cpu", torch.float32) is None
        assert "onednn" in runnable_paths("cpu", torch.float32)
    # the kernel itself refuses before torch would raise deep inside oneDNN
    with pytest.raises(ValueError, match="linear kernel 'onednn': oneDNN's bf16 linear needs"):
        make_linear("onednn", torch.zeros(4, 4, dtype=torch.bfloat16), None)
    assert available_kernels(model) == ("torch", "transposed")
    assert kernel_refusal("transposed", "cpu", torch.bfloat16) is None


def test_on_an_avx2_host_a_bf16_model_decodes_on_auto_with_on_equal_to_off(as_host):
    as_host(AVX2)
    target = random_model("llama", seed=3, dtype=torch.float32, hidden=256, logit_scale=20.0)
    target.model.to(torch.bfloat16)
    target._forward = make_forward(target.model, "auto")
    assert target.forward.choice.path == "torch"
    prompt = [(i * 37 + 5) % 96 for i in range(40)]
    off = Engine(target, EngineConfig(drafter="none")).generate(prompt, 32, stop_tokens=frozenset())
    on = Engine(target, EngineConfig(drafter="ngram", gamma=3)).generate(prompt, 32, stop_tokens=frozenset())
    assert on.tokens == off.tokens and len(off.tokens) == 32


def test_auto_dtype_keeps_bf16_only_where_it_is_native(as_host):
    as_host(AVX2)
    assert resolve_dtype("auto", "cpu", checkpoint=torch.bfloat16) == torch.float32
    assert resolve_dtype("bfloat16", "cpu") == torch.bfloat16  # asked for: runs on F.linear


def test_the_plan_cache_is_keyed_by_the_host_and_distrusts_a_kernel_it_cannot_run(tmp_path, monkeypatch, as_host):
    monkeypatch.setenv("SPECTUNE_FORWARD_PLANS", str(tmp_path / "plans.json"))
    model = random_model("llama", seed=3, dtype=torch.float32, hidden=128).model.to(torch.bfloat16)
    real_key, real_host = machine_key(model), probe().key()
    host = as_host(AVX2)
    assert (machine_key(model) != real_key) == (host.key() != real_host)
    # a file copied from a host that ran oneDNN bf16, under this host's key: not trusted, measured again
    copied = LinearPlan.uniform("onednn").to_dict()
    (tmp_path / "plans.json").write_text(json.dumps({f"{machine_key(model)}|static torch": copied}))
    measured = []

    def measure(m):
        measured.append(1)
        rows = range(1, 9)
        return {"torch/torch": dict.fromkeys(rows, 1.0), "transposed/transposed": dict.fromkeys(rows, 1.0)}

    plan = plan_for(model, "torch", measure=measure)
    assert measured == [1] and plan == LinearPlan.uniform("torch")


def test_a_plan_measurement_past_its_cap_keeps_the_static_rule_says_so_once_and_is_cached(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("SPECTUNE_FORWARD_PLANS", str(tmp_path / "plans.json"))
    model = random_model("llama", seed=3, dtype=torch.float32, hidden=128).model
    with pytest.raises(OverBudget, match=r"measuring would take ~\d+ s here \(cap 0 s\)"):
        measure_forwards(model, repeats=1, budget_s=0.0)
    monkeypatch.setattr(forward_plan, "BUDGET_S", 0.0)
    with caplog.at_level("WARNING", logger="spectune.forward"):
        plan = plan_for(model, "torch")
    assert plan.layers.uniform and plan.head.uniform and plan.kernels() == {"torch"}
    assert plan.note.startswith("not measured: measuring would take")
    (note,) = [r.getMessage() for r in caplog.records]
    assert "\n" not in note and "static rule stays" in note and "plans.json" in note
    monkeypatch.setattr(forward_plan, "measure_forwards", lambda m: pytest.fail("measured a capped plan again"))
    assert plan_for(model, "torch") == plan
    choice = make_forward(model, "mixed").choice  # forced: says it ran on F.linear and why
    assert choice.path == "mixed" and "plan not measured" in choice.reason


def test_a_host_that_slows_down_mid_measurement_stops_at_the_cap(monkeypatch):
    """The projection passed, then the clock ran past the cap (a host other jobs loaded): OverBudget, not minutes."""
    model = random_model("llama", seed=3, dtype=torch.float32, hidden=128).model
    calls = []

    def clock() -> float:  # 1 ms per reading while projecting, then the host turns slow: 10 s per reading
        calls.append(1)
        return 0.001 * len(calls) if len(calls) <= 6 else 10.0 * len(calls)

    monkeypatch.setattr(forward_plan.time, "perf_counter", clock)
    with pytest.raises(OverBudget, match="passed its cap of 60 s"):
        measure_forwards(model, repeats=1, budget_s=60.0)


@pytest.mark.skipif(not TARGET.is_dir(), reason="models/spectune-tiny is not built in this checkout")
def test_the_engine_cli_runs_bf16_on_an_avx2_host_and_refuses_a_forced_onednn_in_one_line():
    env = {"PATH": "/usr/bin:/bin", FEATURES_ENV: AVX2, "SPECTUNE_FORWARD_PLANS": "off", "HOME": str(ROOT)}
    args = [sys.executable, "-m", "engine", "--model", str(TARGET), "--dtype", "bfloat16", "--prompt", "def f(x):"]
    ran = subprocess.run([*args, "--max-new-tokens", "6", "--json"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout)
    assert out["forward"].startswith("torch bfloat16 (auto:") and out["stats"]["new_tokens"] == 6
    refused = subprocess.run([*args, "--forward", "onednn"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith("error: forward path 'onednn' cannot run bfloat16 here: oneDNN's bf16 linear")
