"""The numeric path per forward size (engine/forward_plan.py, path `mixed`): how a plan is fitted from timings,
that it is cached per machine and shapes, that each call runs on its planned kernel, that the packed copy is
counted, and that greedy speculative output equals plain decoding on a mixed path for every drafter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from engine import forward_plan
from engine.engine import Engine, EngineConfig
from engine.forward import EngineForward, PathChoice, make_forward
from engine.forward_plan import fit_plan, plan_for
from engine.host import probe
from engine.kernels import MAX_ROWS, GroupPlan, LinearPlan
from engine.kv import kv_tensors
from engine.llama import LlamaForward
from engine.testing import perturbed_copy, random_model
from tests.conftest import HOST_LACKS
from tests.engine.test_conformance import agreeing_mtp

onednn = pytest.mark.skipif(not probe().onednn, reason=f"{HOST_LACKS} oneDNN in this torch build")
PROMPT = [(i * 37 + 5) % 96 for i in range(40)] + [(i * 11 + 3) % 96 for i in range(12)] * 2
# Verification rows on oneDNN, single rows on F.linear, for both groups: every step mixes kernels.
SPLIT = LinearPlan(GroupPlan("torch", "onednn", 2), GroupPlan("torch", "onednn", 2))


ROWS = range(1, MAX_ROWS + 1)


def combos(**by_combo) -> dict[str, dict[int, float]]:
    """Whole-forward timings by "layers/head" combination; unnamed combinations are slow everywhere."""
    out = {c: {r: 1e3 for r in ROWS} for c in ("torch/torch", "torch/onednn", "onednn/torch", "onednn/onednn")}
    for name, times in by_combo.items():
        out[name.replace("__", "/")] = times
    return out


def test_a_plan_switches_kernels_only_where_a_combination_is_clearly_faster_at_every_larger_size():
    linear = {r: 300.0 * r for r in ROWS}
    flat = {r: 300.0 for r in ROWS}
    head_from_2 = fit_plan(
        combos(torch__torch=linear, torch__onednn={1: 400.0, **{r: 300.0 for r in ROWS if r > 1}}), "torch"
    )
    assert head_from_2 == LinearPlan(GroupPlan("torch", "torch", MAX_ROWS + 1), GroupPlan("torch", "onednn", 2))
    # 2 rows: slower there, 3 and up clearly faster
    almost = {1: 300.0, 2: 310.0, **{r: 300.0 * r for r in range(3, MAX_ROWS + 1)}}
    plan = fit_plan(combos(torch__torch=almost, torch__onednn={r: 320.0 for r in ROWS}), "torch")
    assert plan.head == GroupPlan("torch", "onednn", 3) and plan.layers.uniform
    # a faster size in the middle that does not hold to the end does not switch
    dip = {r: (100.0 if r == 4 else 400.0) for r in ROWS}
    assert not fit_plan(combos(torch__torch=flat, onednn__onednn=dip), "torch").mixed
    # one noisy size does not block a switch the sizes around it show
    noisy = {**{r: 0.8 * 300.0 * r for r in ROWS}, 1: 1e3, 6: 300.0 * 6 * 0.95}
    assert fit_plan(combos(torch__torch=linear, torch__onednn=noisy), "torch").head == GroupPlan("torch", "onednn", 2)
    # noise around equal never flips the static choice
    assert fit_plan(combos(torch__torch=flat, onednn__torch={r: 290.0 for r in ROWS}), "torch") == LinearPlan.uniform(
        "torch"
    )
    # both groups may switch, at their own sizes
    both = combos(torch__torch=linear, onednn__onednn={r: 100.0 for r in ROWS})
    assert fit_plan(both, "torch") == LinearPlan.uniform("onednn")
    assert fit_plan(both, "onednn") == LinearPlan.uniform("onednn")


def test_a_plan_is_measured_once_per_machine_and_shapes_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECTUNE_FORWARD_PLANS")
    model = random_model("llama", seed=1, dtype=torch.float32, hidden=64).model
    calls = []

    def fake_measure(m):
        calls.append(m)
        head = {1: 2.0, **{r: 1.0 for r in ROWS if r > 1}}
        return combos(torch__torch={r: 1.0 * r for r in ROWS}, torch__onednn=head)

    plan = plan_for(model, "torch", measure=fake_measure)
    assert plan == LinearPlan(GroupPlan("torch", "torch", MAX_ROWS + 1), GroupPlan("torch", "onednn", 2))
    assert plan.mixed and plan.describe() == "layers F.linear; LM head F.linear below 2 rows, oneDNN from 2"

    def must_not_measure(m):
        raise AssertionError("measured again although the plan is cached")

    assert plan_for(model, "torch", measure=must_not_measure) == plan and len(calls) == 1
    stored = json.loads((tmp_path / "forward-plans.json").read_text())
    (key,) = stored
    assert "threads" in key and "float32" in key and "(8192" not in key and "static torch" in key
    # another thread count is another machine setting: measured again
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        plan_for(model, "torch", measure=fake_measure)
    finally:
        torch.set_num_threads(threads)
    assert len(calls) == 2
    # a broken cache file costs a measurement, not the run
    (tmp_path / "forward-plans.json").write_text("{not json")
    assert plan_for(model, "torch", measure=fake_measure) == plan and len(calls) == 3
    assert json.loads((tmp_path / "forward-plans.json").read_text())


def test_a_broken_plan_entry_names_what_is_wrong():
    with pytest.raises(ValueError, match="unknown kernel"):
        LinearPlan.from_dict(
            {
                "layers": {"single": "torch", "many": "cublas", "from_rows": 2},
                "head": {"single": "torch", "many": "torch", "from_rows": 9},
            }
        )
    with pytest.raises(ValueError, match="not a forward plan"):
        LinearPlan.from_dict({"layers": {}})


@onednn
def test_each_call_runs_on_the_kernel_its_rows_are_planned_for():
    """A 1-row call gives F.linear's logits bit for bit, a 5-row call oneDNN's (the head) bit for bit."""
    model = random_model("llama", seed=3, dtype=torch.float32, hidden=128, logit_scale=20.0).model
    plan = LinearPlan(GroupPlan("torch", "torch", MAX_ROWS + 1), GroupPlan("torch", "onednn", 3))
    mixed = LlamaForward(model, plan=plan)
    on_torch = LlamaForward(model, kernel="torch")
    head_onednn = LlamaForward(model, plan=LinearPlan(plan.layers, GroupPlan("onednn", "onednn", MAX_ROWS + 1)))
    for rows, reference in ((1, on_torch), (2, on_torch), (5, head_onednn)):
        caches = mixed.new_cache(), reference.new_cache()
        mixed(caches[0], PROMPT[:30])
        reference(caches[1], PROMPT[:30])
        got = mixed(caches[0], PROMPT[30 : 30 + rows], keep=rows)[0]
        want = reference(caches[1], PROMPT[30 : 30 + rows], keep=rows)[0]
        assert torch.equal(got, want), f"{rows} rows did not run on the planned kernel"
    assert mixed.kernel == "mixed" and mixed.packed_bytes == model.lm_head.weight.numel() * 4
    assert on_torch.packed_bytes == 0


@onednn
def test_forced_and_auto_choices_say_what_was_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_FORWARD_PLANS", str(tmp_path / "plans.json"))
    model = random_model("llama", seed=3, dtype=torch.float32, hidden=128).model
    monkeypatch.setattr(forward_plan, "measure_forwards", lambda m: _fake(head_from=3))
    forced = make_forward(model, "mixed")
    assert forced.choice.path == "mixed" and forced.choice.plan == LinearPlan(
        GroupPlan("torch", "torch", MAX_ROWS + 1), GroupPlan("torch", "onednn", 3)
    )
    assert forced.choice.describe() == (
        "mixed float32 (forced: engine llama forward; measured here: layers F.linear; "
        "LM head F.linear below 3 rows, oneDNN from 3)"
    )
    assert make_forward(model, "auto").choice.path == "mixed"
    # where nothing else pays, auto keeps the static kernel and says it measured
    flat = random_model("llama", seed=4, dtype=torch.float32, hidden=128, vocab=200).model
    monkeypatch.setattr(forward_plan, "measure_forwards", lambda m: _fake(head_from=None))
    kept = make_forward(flat, "auto").choice
    assert kept.path == "torch" and "measured here" in kept.reason
    flat_ms = {r: 1.0 for r in ROWS}
    # one kernel that no single path is named after, at every size: the mixed path runs it
    wide = random_model("llama", seed=5, dtype=torch.float32, hidden=128, vocab=300).model
    fast = {r: 0.5 for r in ROWS}
    monkeypatch.setattr(
        forward_plan, "measure_forwards", lambda m: combos(torch__torch=flat_ms, transposed__transposed=fast)
    )
    everywhere = make_forward(wide, "auto").choice
    assert everywhere.path == "mixed" and everywhere.plan == LinearPlan.uniform("transposed")
    assert "layers matmul over [in, out] weights; LM head matmul over [in, out] weights" in everywhere.reason
    # narrow models are all dispatch: no measurement, the static rule
    narrow = random_model("llama", seed=3, dtype=torch.float32, hidden=64).model
    monkeypatch.setattr(forward_plan, "measure_forwards", lambda m: pytest.fail("measured a narrow model"))
    assert make_forward(narrow, "auto").choice.plan is None
    monkeypatch.setattr(forward_plan, "measure_forwards", lambda m: _fake(head_from=2, kernel="transposed"))
    in_float64 = make_forward(random_model("llama").model, "mixed").choice  # no oneDNN needed
    assert in_float64.path == "mixed" and in_float64.plan.head == GroupPlan("torch", "transposed", 2)


def _fake(head_from: int | None, kernel: str = "onednn") -> dict:
    head = {r: (1.0 if head_from is not None and r >= head_from else 5.0 * r) for r in ROWS}
    return combos(torch__torch={r: 1.0 * r for r in ROWS}, **{f"torch__{kernel}": head})


@pytest.fixture(scope="module")
def split_target():
    """An fp32 Llama (logit margins wide: no last-bit ties) whose forward mixes kernels at every step."""
    target = random_model("llama", seed=5, dtype=torch.float32, hidden=128, logit_scale=20.0)
    target._forward = EngineForward(target.model, PathChoice("mixed", "float32", "test: SPLIT", SPLIT))
    return target


@onednn
@pytest.mark.parametrize("drafter", ["ngram", "suffix", "draft_model", "mtp", "layer_skip", "mtp+ngram"])
def test_greedy_speculation_on_a_mixed_path_equals_plain_decoding_and_the_kv_equals_a_recomputation(
    split_target, drafter
):
    target = split_target
    extra = {}
    if drafter == "draft_model":
        extra["draft"] = perturbed_copy(target, noise=0.02, seed=2)
    if drafter.startswith("mtp"):
        extra["mtp"] = agreeing_mtp(target, seed=4)
    options = {"layers": 1} if drafter == "layer_skip" else {}
    off = Engine(target, EngineConfig(drafter="none")).generate(PROMPT, 40, stop_tokens=frozenset())
    engine = Engine(target, EngineConfig(drafter=drafter, gamma=4, options=options), **extra)
    session = engine.new_session()
    on = engine.generate(PROMPT, 40, stop_tokens=frozenset(), session=session)
    assert on.tokens == off.tokens, f"{drafter} on a mixed path diverged from plain decoding"
    assert on.stats.accepted > 0 and on.stats.accepted < on.stats.drafted  # both branches of the rollback
    fresh = target.forward.new_cache()
    target.forward(fresh, session.history[:-1])
    for (k, v), (fk, fv) in zip(kv_tensors(session.cache), kv_tensors(fresh), strict=True):
        torch.testing.assert_close(k, fk, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(v, fv, atol=1e-5, rtol=1e-5)
    assert engine.packed_bytes >= target.forward.packed_bytes > 0


def test_the_plan_file_follows_the_variables_and_off_keeps_the_static_rule(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("SPECTUNE_FORWARD_PLANS", "off")
    assert forward_plan.cache_file() == Path(tmp_path / "c" / "forward-plans.json")
    assert not forward_plan.measuring_enabled()
    model = random_model("llama", seed=3, dtype=torch.float32, hidden=128).model
    monkeypatch.setattr(forward_plan, "measure_forwards", lambda m: pytest.fail("measured with plans off"))
    assert make_forward(model, "auto").choice.plan is None
    monkeypatch.setenv("SPECTUNE_FORWARD_PLANS", str(tmp_path / "p.json"))
    assert forward_plan.cache_file() == tmp_path / "p.json" and forward_plan.measuring_enabled()


@onednn
def test_the_measurement_times_every_combination_at_every_size_on_the_model_itself():
    model = random_model("llama", seed=3, dtype=torch.float32, hidden=128).model
    times = forward_plan.measure_forwards(model, repeats=1)
    # every combination of F.linear with one copying kernel (two copying kernels at once are not measured)
    assert set(times) == {
        "torch/torch",
        *(f"{a}/{b}" for k in ("onednn", "transposed") for a, b in (("torch", k), (k, "torch"), (k, k))),
    }
    assert all(set(by_rows) == set(ROWS) and min(by_rows.values()) > 0 for by_rows in times.values())
    assert fit_plan(times, "torch").kernels() <= {"torch", "onednn", "transposed"}
