"""Nominal capacity of a static cluster, in requests per second, for a request mix.

Uses the control plane's own capacity model (:class:`~dilaserve.control.load.CapacityModel`,
see ``docs/architecture.md``, control algorithms) with the replayed dynamics' step law:
instance throughput in token-steps per second at its best batch, a block priced as
``S_c - 1`` cache steps and one recompute step, divided by the mean load of a request
(token-steps) at a fixed threshold. Experiments use it to place their load levels relative
to what the cluster can carry, so the same experiment means the same thing on a fast and
on a slow latency profile.
"""

from __future__ import annotations

import numpy as np

from dilaserve.control.load import CapacityModel
from dilaserve.control.step_law import StepLaw
from dilaserve.reconfig.plan import static_layout
from dilaserve.sim.progress import canvas_length
from dilaserve.sim.replay import ReplayTable
from dilaserve.sim.setting import ClusterSetting


def nominal_capacity_rps(
    setting: ClusterSetting, table: ReplayTable, prompt_tokens: np.ndarray, output_tokens: np.ndarray, threshold: float
) -> float:
    """Requests/s the static ``initial_tp`` cluster sustains at ``threshold`` (throughput, not SLO)."""
    b = setting.block_length
    spb = StepLaw.from_replay(table, b, [threshold]).steps(threshold)
    gen = np.array([canvas_length(o, b) for o in output_tokens], dtype=np.float64)
    tokens = np.asarray(prompt_tokens, dtype=np.float64) + gen
    blocks = gen / b
    # ReqLoad with caching: (steps - recompute) x B + recompute x tokens, one recompute per block.
    load = float(np.mean(blocks * ((spb - 1) * b + tokens)))
    model = CapacityModel(setting.profile, setting.control.capacity_batch_grid)
    cache = (b, int(round(tokens.mean() / 16) * 16) or 16)
    throughput = sum(
        model.throughput(s.tp, s.max_batch_tokens, cache, spb)
        for s in static_layout(setting.cluster, setting.initial_tp)
    )
    return throughput / load
