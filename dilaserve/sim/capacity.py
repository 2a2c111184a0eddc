"""Nominal capacity of a static cluster, in requests per second, for a request mix.

Uses the control plane's own capacity model (:class:`~dilaserve.control.cost_model.CapacityModel`,
see ``docs/architecture.md``, control algorithms) with the replayed dynamics' step law in the
setting's family: instance throughput in token-steps per second at its best batch, a request
priced by :meth:`~dilaserve.control.step_law.StepLaw.split` (bidirectional: per block
``S_c - 1`` cache steps and one recompute step; block-causal: one prefill, every other step
a cache step, one append per later block), divided by the mean load of a request
(token-steps) at a fixed threshold. Experiments use it to place their load levels relative
to what the cluster can carry, so the same experiment means the same thing on a fast and
on a slow latency profile.
"""

from __future__ import annotations

import numpy as np

from dilaserve.control.cost_model import CapacityModel
from dilaserve.control.step_law import StepLaw
from dilaserve.predict.replay import ReplayTable
from dilaserve.reconfig.plan import static_layout
from dilaserve.sim.progress import canvas_length
from dilaserve.sim.setting import ClusterSetting


def nominal_capacity_rps(
    setting: ClusterSetting, table: ReplayTable, prompt_tokens: np.ndarray, output_tokens: np.ndarray, threshold: float
) -> float:
    """Requests/s the static ``initial_tp`` cluster sustains at ``threshold`` (throughput, not SLO)."""
    b = setting.block_length
    law = StepLaw.from_replay(table, b, [threshold]).with_family(setting.block_causal)
    prompt = np.asarray(prompt_tokens, dtype=np.float64)
    gen = np.array([canvas_length(o, b) for o in output_tokens], dtype=np.float64)
    # ReqLoad of each whole request: the token-steps of its split (one recompute per block,
    # or one prefill and the appends).
    load = float(np.mean([law.split(threshold, p, g).work for p, g in zip(prompt, gen)]))
    model = CapacityModel(setting.profile, setting.control.capacity_batch_grid)
    tokens = int(round((prompt + gen).mean() / 16) * 16) or 16
    mean_gen = max(b, round(gen.mean() / b) * b)
    split = law.split(threshold, max(tokens - mean_gen, 0), mean_gen)
    throughput = sum(
        model.throughput(s.tp, s.max_batch_tokens, split) for s in static_layout(setting.cluster, setting.initial_tp)
    )
    return throughput / load
