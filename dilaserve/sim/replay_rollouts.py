"""Rollouts drawn from a step law: requests decoded by the replay instead of a model.

A law with no model behind it (``llada-8b-published``) still needs the pipeline's path to
a predictor: rollouts, the validated step table, a tuned predictor. These rollouts step
each request through :class:`~dilaserve.sim.progress.ReplayProgress`, exactly as the
simulator does, and record the same rows as :func:`dilaserve.predict.rollouts.run_rollouts`
(progress features before the step, its kind, tokens committed and confidence statistics,
steps left), so the step table, the predictor and the step dynamics built from them go
through the same code as the embedded model's.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from dilaserve.cluster.base import StepAssignment
from dilaserve.predict.dynamics import StepDynamics
from dilaserve.predict.replay import ReplayTable
from dilaserve.predict.rollouts import PROGRESS_COLUMNS, STEP_CONF_COLUMNS
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.workload import WorkloadRequest

#: Prompt tokens of a replayed rollout: no progress feature depends on the prompt.
PROMPT_TOKENS = 16


def replay_rollouts(
    dynamics: StepDynamics,
    output_lengths: Sequence[int],
    thresholds: Sequence[float],
    block_length: int = 32,
    repeats: int = 1,
    seed: int = 0,
    prefix: str = "replay",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(step table, requests): every output length decoded ``repeats`` times at every
    threshold. Request ids are ``{prefix}-{i}-{r}`` (one per length and repeat, shared by
    its thresholds, as a prompt's are in model rollouts)."""
    progress = ReplayProgress(ReplayTable(dynamics), quality=None, seed=seed)
    cols = (
        "request_id",
        "threshold",
        "block_length",
        "output_length",
        "step",
        "label",
        *PROGRESS_COLUMNS,
        "step_kind",
        "tokens_committed",
        *STEP_CONF_COLUMNS,
    )
    data: dict[str, list] = {c: [] for c in cols}
    reqs: dict[str, list] = {"request_id": [], "threshold": [], "output_length": [], "steps": [], "recompute_steps": []}
    for i, length in enumerate(output_lengths):
        for r in range(repeats):
            rid = f"{prefix}-{i}-{r}"
            for t in thresholds:
                st = progress.new_state(WorkloadRequest(f"{rid}@{t:g}", 0.0, PROMPT_TOKENS, int(length)), block_length)
                rows = []
                while not st.finished:
                    feats = st.progress_features()
                    kind, before = st.next_kind, st.num_unmasked
                    progress.step([StepAssignment(st, float(t))])
                    rows.append((*feats[1:], kind.value, st.num_unmasked - before, *st.conf_stats))
                progress.release(st)
                n = len(rows)
                data["request_id"] += [rid] * n
                data["threshold"] += [float(t)] * n
                data["block_length"] += [block_length] * n
                data["output_length"] += [st.gen_length] * n
                data["step"] += list(range(n))
                data["label"] += list(range(n, 0, -1))
                for c, values in zip(cols[6:], zip(*rows)):
                    data[c] += list(values)
                reqs["request_id"].append(rid)
                reqs["threshold"].append(float(t))
                reqs["output_length"].append(st.gen_length)
                reqs["steps"].append(st.steps_done)
                reqs["recompute_steps"].append(st.recompute_steps_done)
    ints = {c: pl.Int64 for c in ("block_length", "output_length", "step", "label", "tokens_committed")}
    steps = pl.DataFrame(data, schema_overrides={**ints, "step_kind": pl.Utf8, "threshold": pl.Float64})
    return steps, pl.DataFrame(reqs)
