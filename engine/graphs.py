"""CUDA graphs for decode and verify steps: the `graphs` forward path (CUDA only).

At batch 1 a GPU step of a small model is mostly kernel-launch latency, which is why a small draft
costs nearly what a large target does (gpt-fast's lesson). Here each session's KV cache is one static
buffer of the model's context (LlamaForward.static_cache), and a step of k = 1..max_k new tokens
(plain decoding is k = 1, a verification k = gamma + 1) replays a CUDA graph of
LlamaForward.static_step captured once per (session cache, k): the token ids and positions are
copied into the graph's input buffers, the replay writes K/V in place and leaves the logits in its
output buffer. A prefill (more than max_k tokens) or a call asking for hidden states runs the eager
forward over the same buffer, so both kinds of call see one cache.

The static step's maths is tested against the eager forward on the CPU (tests/engine/test_graphs.py);
capture and replay need a GPU and are measured only where one is lent (see the closing note of issue 12).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from common.errors import ConfigError
from engine.llama import LlamaCache, LlamaForward

DEFAULT_MAX_K = 17  # gamma up to 16 (EngineConfig.max_gamma's default) + 1


@dataclass
class _Graph:
    """One captured step: its input buffers, its output buffer and the graph."""

    ids: torch.Tensor  # [k] long
    pos: torch.Tensor  # [k] long
    logits: torch.Tensor  # [k, V]
    graph: torch.cuda.CUDAGraph


class GraphedSteps:
    """Replays captured static steps of `forward` (a LlamaForward) for k <= max_k; `eager` runs the rest.

    Graphs live on the cache they are bound to (`cache.graphs`, by k): they die with the session, and a
    cache that had to grow (LlamaCache.reserve) drops them, since they point at its old buffers.
    """

    def __init__(self, forward: LlamaForward, eager, capacity: int, max_k: int = DEFAULT_MAX_K) -> None:
        if forward.device.type != "cuda":
            raise ConfigError("forward path 'graphs' needs a CUDA device (CUDA graphs)")
        self.forward = forward
        self.eager = eager  # (cache, tokens, keep, hidden) -> (logits, hidden): the eager forward
        self.capacity = capacity
        self.max_k = max_k
        self._pool = torch.cuda.graph_pool_handle()  # every graph shares one memory pool

    def new_cache(self) -> LlamaCache:
        """A static cache of `capacity` positions (its buffers never move, so graphs can bind to them)."""
        return self.forward.static_cache(self.capacity)

    def _capture(self, cache: LlamaCache, k: int, start: int) -> _Graph:
        device = self.forward.device
        ids = torch.zeros(k, dtype=torch.long, device=device)
        pos = torch.arange(start, start + k, device=device)  # warm-up writes only positions this call overwrites
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(2):  # warm-up: lazy kernel and workspace initialisation outside the graph
                self.forward.static_step(cache, ids, pos)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool), torch.inference_mode():
            logits = self.forward.static_step(cache, ids, pos)
        return _Graph(ids, pos, logits, graph)

    def __call__(self, cache: LlamaCache, tokens: list[int], keep: int = 1, hidden: bool = False):
        """Logits of the last `keep` positions [keep, V]; graphed when 1 <= len(tokens) <= max_k and no hidden."""
        start, k = cache.length, len(tokens)
        if hidden or k > self.max_k or start + k > cache.capacity:
            return self.eager(cache, tokens, keep, hidden)
        if k not in cache.graphs:
            cache.graphs[k] = self._capture(cache, k, start)
        g = cache.graphs[k]
        g.ids.copy_(torch.tensor(tokens))
        g.pos.copy_(torch.arange(start, start + k))
        g.graph.replay()
        cache.length = start + k
        return g.logits[-keep:].clone(), None  # the next replay overwrites the graph's output buffer
