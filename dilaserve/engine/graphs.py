"""Cache steps replayed from CUDA graphs, one per static shape; eager elsewhere.

A cache step at small batch is bound by the host: about 1,300 kernel launches per step for a
few milliseconds of GPU work (docs/architecture.md, "Engine memory layout and captured
steps"). Captured once per input layout (rows, fed length, attended length, logit rows) and
replayed, it costs one launch and one copy of its packed inputs. Capture needs what :mod:`dilaserve.engine.cache_step` guarantees: static
shapes, no host synchronisation in the forward, and K/V at fixed addresses (the pool is
allocated once on CUDA and never grows there). Recompute steps stay eager: they are bound
by the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dilaserve.model.adapters import DiffusionLM

from .cache_step import Layout, packed_forward, to_device
from .kv_pool import KVPool


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    inputs: torch.Tensor  # the packed input buffer the graph reads
    logits: torch.Tensor  # the static buffer it writes


class CacheStepRunner:
    """Runs a pooled cache step: from a captured graph on CUDA (when ``capture``), else eagerly."""

    def __init__(self, lm: DiffusionLM, pool: KVPool, capture: bool):
        self.lm, self.pool = lm, pool
        self.capture = capture and lm.device.type == "cuda"
        self._graphs: dict[tuple, _Captured] = {}
        self._mempool = None  # one memory pool shared by every graph's intermediates

    def run(self, host: np.ndarray, layout: Layout, first: int) -> torch.Tensor:
        """Logits (R, P, V) of a step over the pool's slots ``first .. first + R`` on packed
        inputs (a captured step's window starts at slot 0)."""
        past = self.pool.window(first, layout.rows, layout.tokens)
        if not self.capture:
            return packed_forward(self.lm, past, to_device(host, self.lm.device), layout)
        if first:
            raise ValueError(f"a captured cache step's window starts at slot 0, not {first}")
        # a graph reads the pool and the rotary tables at their addresses when captured: a
        # recompute pass over a canvas longer than a slot regrows a native model's tables, and
        # a graph over the old ones must not be replayed
        tables = getattr(self.lm.model, "_rope", None)
        rope = (tables[0] if isinstance(tables, tuple) else tables).data_ptr() if tables is not None else 0
        key = (layout, self.pool.kv.data_ptr(), rope)
        cap = self._graphs.get(key)
        if cap is None:
            cap = self._graphs[key] = self._capture(to_device(host, self.lm.device), layout, past)
        else:
            cap.inputs.copy_(torch.from_numpy(host), non_blocking=True)
        cap.graph.replay()
        return cap.logits

    def run_over(self, host: np.ndarray, layout: Layout, past: list) -> torch.Tensor:
        """An eager step over ``past`` (a gathered scratch batch)."""
        return packed_forward(self.lm, past, to_device(host, self.lm.device), layout)

    def _capture(self, static: torch.Tensor, layout: Layout, past: list) -> _Captured:
        # warm up on a side stream (cuBLAS workspaces, lazy inits), as torch.cuda.graphs asks;
        # the warm-up writes the same fresh K/V the replay below writes again
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            packed_forward(self.lm, past, static, layout)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._mempool):
            logits = packed_forward(self.lm, past, static, layout)
        self._mempool = graph.pool()
        return _Captured(graph, static, logits)
