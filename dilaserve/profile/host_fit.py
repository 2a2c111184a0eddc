"""The eager engine's host terms, fitted to its steps measured on a GPU
(:data:`~dilaserve.profile.analytic.EAGER_H200` holds the result).

The measurement (data/gpu/, one JSON object a line) has one ``"what": "engine"`` row per
step shape: ``kind`` (recompute or cache), ``batch`` (requests), ``tokens`` (in the batch:
``batch x context`` for recompute, ``batch x block`` fed for cache) and ``ms``, the median
wall time of ``DenoisingEngine.step``. The analytic step is
``max(roofline, host_step + host_request x requests) + step_overhead`` with no separate
overhead here, so the fit has two parts that do not interact on these shapes:

* recompute steps are compute-bound (0.17-1.4 s against ~35 ms of host work):
  ``compute_eff`` is the least-squares fit of ``FLOPs / (peak x compute_eff)`` to them in
  relative error (closed form);
* cache steps are host-bound at small batch: ``host_step_s`` and ``host_request_s`` are the
  linear least-squares fit of ``host_step + host_request x batch`` to them in relative error.

The batch-1 recompute row is left out: it is the engine's cold first call (data/gpu/README.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dilaserve.engine.state import StepKind
from dilaserve.profile.analytic import GPUS, MODELS, ROOFLINE, RooflineParams, roofline_tp1


@dataclass(frozen=True)
class EngineStep:
    """One measured engine step: ``kind`` over ``batch`` requests, ``tokens`` in the batch, in ``ms``."""

    kind: StepKind
    batch: int
    tokens: float
    ms: float


def load_engine_steps(path: Path) -> list[EngineStep]:
    """The fit's rows of one measurement file: every engine step but the cold first call."""
    steps = []
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("what") != "engine":
            continue
        kind = StepKind.RECOMPUTE if row["kind"] == "recompute" else StepKind.CACHE
        if kind is StepKind.RECOMPUTE and row["batch"] == 1:
            continue  # the cold first call (data/gpu/README.md), not a step the engine repeats
        steps.append(EngineStep(kind, int(row["batch"]), float(row["tokens"]), float(row["ms"])))
    return steps


def fit_host_terms(model: str, gpu: str, steps: list[EngineStep], base: RooflineParams = ROOFLINE) -> RooflineParams:
    """``base`` with ``compute_eff``, ``host_step_s`` and ``host_request_s`` fitted to ``steps``
    of ``model`` on ``gpu`` (keys of :data:`MODELS` and :data:`GPUS`), and no separate
    ``step_overhead_s``."""
    rec = [s for s in steps if s.kind is StepKind.RECOMPUTE]
    cache = [s for s in steps if s.kind is StepKind.CACHE]
    if not rec or len(cache) < 2:
        raise ValueError(
            f"the fit needs recompute steps and cache steps at two batch sizes at least, got {len(rec)} "
            f"and {len(cache)}: measure them with `python -m dilaserve.bench engine` on the GPU"
        )
    m, g = MODELS[model], GPUS[gpu]
    # Seconds at full efficiency over measured seconds: the best compute_eff in relative error
    # minimises sum (a / eff - 1)^2, i.e. 1 / eff = sum a / sum a^2.
    full = replace(base, compute_eff=1.0)
    a = np.array([roofline_tp1(m, g, full, s.tokens, s.kind) / (s.ms / 1e3) for s in rec])
    compute_eff = float((a * a).sum() / a.sum())
    y = np.array([s.ms / 1e3 for s in cache])
    design = np.stack([np.ones_like(y), [float(s.batch) for s in cache]], axis=1) / y[:, None]
    (host_step, host_request), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    return replace(
        base,
        compute_eff=compute_eff,
        step_overhead_s=0.0,
        host_step_s=max(float(host_step), 0.0),
        host_request_s=max(float(host_request), 0.0),
    )
