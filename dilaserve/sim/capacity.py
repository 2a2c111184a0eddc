"""Nominal capacity of a static cluster, in requests per second, for a request mix.

Uses the control plane's own capacity model (:class:`~dilaserve.control.load.CapacityModel`,
DESIGN.md section 5): instance throughput in token-steps per second at its best batch,
divided by the mean load of a request (token-steps) at a fixed threshold. Experiments use
it to place their load levels relative to what the cluster can carry, so the same
experiment means the same thing on a fast and on a slow latency profile.
"""
from __future__ import annotations

import numpy as np

from dilaserve.control.load import CapacityModel
from dilaserve.reconfig.plan import static_layout
from dilaserve.sim.progress import canvas_length
from dilaserve.sim.replay import ReplayTable
from dilaserve.sim.setting import ClusterSetting


def nominal_capacity_rps(setting: ClusterSetting, table: ReplayTable, prompt_tokens: np.ndarray,
                         output_tokens: np.ndarray, threshold: float) -> float:
    """Requests/s the static ``initial_tp`` cluster sustains at ``threshold`` (throughput, not SLO)."""
    b = setting.block_length
    gen = np.array([canvas_length(o, b) for o in output_tokens], dtype=np.float64)
    tokens = np.asarray(prompt_tokens, dtype=np.float64) + gen
    blocks = gen / b
    steps = blocks * table.block_steps(threshold, b)[0]
    # ReqLoad with caching: (steps - recompute) x B + recompute x tokens, one recompute per block.
    load = float(np.mean((steps - blocks) * b + blocks * tokens))
    model = CapacityModel(setting.profile, setting.control.capacity_batch_grid)
    cache = (b, int(round(tokens.mean() / 16) * 16) or 16)
    throughput = sum(model.throughput(s.tp, s.max_batch_tokens, cache)
                     for s in static_layout(setting.cluster, setting.initial_tp))
    return throughput / load
