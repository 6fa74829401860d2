"""The `graphs` path (engine/graphs.py): its static step computes what the eager forward computes.

The static step (fixed shapes: the whole buffer under a device-side mask, K/V written by index) is
what a CUDA graph replays; its maths runs on the CPU too, so it is checked here in float64 against the
eager forward after prefills, rollbacks and steps of several widths. Capture and replay need a GPU.
"""

from __future__ import annotations

import pytest
import torch

from engine.engine import Engine, EngineConfig
from engine.forward import choose_path, make_forward
from engine.kv import crop_cache, kv_tensors
from engine.testing import random_model
from tests.conftest import needs_cuda

PROMPT = [(i * 37 + 5) % 96 for i in range(30)]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral", "qwen2_sliding"])
def test_static_step_equals_the_eager_forward(arch):
    model = random_model(arch, seed=5)
    forward = make_forward(model.model, "torch")
    static, eager = forward.static_cache(64), forward.new_cache()
    forward(static, PROMPT[:20])  # a prefill runs eager over the static buffer
    forward(eager, PROMPT[:20])
    for start, k in ((20, 1), (21, 5), (23, 3), (26, 4)):  # (23, 3) after a rollback of the (21, 5) step
        crop_cache(static, start)
        crop_cache(eager, start)
        ids, pos = torch.tensor(PROMPT[start : start + k]), torch.arange(start, start + k)
        got = forward.static_step(static, ids, pos)
        static.length = start + k
        want, _ = forward(eager, PROMPT[start : start + k], keep=k)
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
    assert static.capacity == 256 and static.k[0].data_ptr() == static.k[0].data_ptr()
    for (k, v), (ek, ev) in zip(kv_tensors(static), kv_tensors(eager), strict=True):
        torch.testing.assert_close(k, ek, atol=1e-10, rtol=1e-10)
        torch.testing.assert_close(v, ev, atol=1e-10, rtol=1e-10)


def test_growing_a_static_cache_drops_the_graphs_bound_to_it():
    forward = make_forward(random_model("llama").model, "torch")
    cache = forward.static_cache(256)
    cache.graphs[1] = object()  # stands for a captured graph: it points at these buffers
    cache.reserve(200)
    assert cache.graphs  # no reallocation: still valid
    cache.reserve(300)
    assert not cache.graphs


def test_graphs_path_needs_cuda():
    model = random_model("llama")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the CUDA test below covers the path")
    with pytest.raises(ValueError, match="'graphs' cannot run float64 here: needs a CUDA device"):
        choose_path(model.model, "graphs")


@needs_cuda
def test_graphed_decoding_equals_eager_decoding_on_cuda():
    target = random_model("llama", seed=7, dtype=torch.float32, forward="graphs")
    target.model.to("cuda")
    target.device = torch.device("cuda")
    eager = random_model("llama", seed=7, dtype=torch.float32, forward="torch")
    eager.model.to("cuda")
    eager.device = torch.device("cuda")
    prompt = [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6, 7]
    want = Engine(eager, EngineConfig(drafter="none")).generate(prompt, 40).tokens
    for drafter in ("none", "ngram", "suffix"):
        got = Engine(target, EngineConfig(drafter=drafter, gamma=4)).generate(prompt, 40).tokens
        assert got == want, drafter
