"""The ``llada-8b-published`` step law: the embedded model's recorded steps resampled so
that their tokens per step meet the values Fast-dLLM publishes for LLaDA, with a quality
curve through the published accuracy points (docs/architecture.md, "Two step laws").

This is a what-if **calibrated to published numbers, not a measurement of LLaDA**. The
speed side is a reweighting of real steps: at each threshold, every recorded step of the
embedded model keeps its tokens committed and the confidence statistics it computed, and
is drawn with weight ``exp(-lam * tokens)``; ``lam`` is solved so that the expected steps
per block of the reweighted pools (the same Markov chain the simulator replays) give
``B / S_c`` equal to the published tokens per step. The quality side has no steps at all:
an accuracy per threshold through the published points.

Published values (LLaDA-8B-Instruct, GSM8K 5-shot, generation length 256, block 32):

* tokens committed per step, Fast-dLLM (arXiv 2505.22618) Fig. 5, read from its labels:
  0.5: 7.01, 0.6: 6.17, 0.7: 5.12, 0.8: 4.24, 0.9: 3.25 (1.0: one token per step);
* accuracy, Fast-dLLM Table 1: 79.3% with one token per step, 78.5% at threshold 0.9
  with the cache; DiLaServe section 2.2.1: 0.9 to 0.7 costs 1.5 points of accuracy.

The quality curve is linear through 0.7 (77.0%), 0.9 (78.5%) and 1.0 (79.3%); 0.8 is
interpolated, and 0.5 and 0.6 are *extrapolated* with the 0.7-0.9 slope (nothing is
published below 0.7), which makes low thresholds cheap in quality: the optimistic end of
what LLaDA might do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from dilaserve.predict.dynamics import StepDynamics
from dilaserve.predict.quality import FixedRow, MixedRow, ThresholdQuality

#: Fast-dLLM Fig. 5: mean tokens committed per step by threshold (LLaDA-Instruct, GSM8K).
PUBLISHED_TOKENS_PER_STEP: dict[float, float] = {0.5: 7.01, 0.6: 6.17, 0.7: 5.12, 0.8: 4.24, 0.9: 3.25, 1.0: 1.00}
#: Published accuracy points (threshold: accuracy): Fast-dLLM Table 1 at 1.0 and 0.9,
#: 0.7 from DiLaServe's "0.9 to 0.7 costs 1.5 points".
PUBLISHED_ACCURACY: dict[float, float] = {0.7: 0.785 - 0.015, 0.9: 0.785, 1.0: 0.793}
#: How far the calibrated tokens per step may sit from the published values (relative).
TOLERANCE = 0.03
LABEL = (
    "calibrated to Fast-dLLM's published LLaDA-8B tokens per step and accuracy (a what-if on the "
    "embedded model's resampled steps, not a measurement of LLaDA)"
)


def published_accuracy(threshold: float) -> float:
    """The quality curve: linear through the published points, extrapolated below 0.7
    with the 0.7-0.9 slope, clipped to [0, 1]."""
    xs = sorted(PUBLISHED_ACCURACY)
    ys = [PUBLISHED_ACCURACY[x] for x in xs]
    t = float(threshold)
    if t < xs[0]:
        slope = (ys[1] - ys[0]) / (xs[1] - xs[0])
        return float(min(1.0, max(0.0, ys[0] + slope * (t - xs[0]))))
    return float(np.interp(t, xs, ys))


def _block_steps(tokens_by_bucket: list[np.ndarray], weights_by_bucket: list[np.ndarray], block_length: int) -> float:
    """Expected steps of one block under weighted bucket pools (the replay's Markov chain,
    :meth:`dilaserve.predict.replay.ReplayTable.block_steps`, with weights)."""
    n = len(tokens_by_bucket)
    e = np.zeros(block_length + 1)
    for u in range(block_length - 1, -1, -1):
        b = min(u * n // block_length, n - 1)
        k, w = tokens_by_bucket[b], weights_by_bucket[b]
        e[u] = 1.0 + float(np.dot(w, e[np.minimum(u + np.maximum(k, 1), block_length)]) / w.sum())
    return float(e[0])


def _pools(samples: pl.DataFrame, threshold: float, n_buckets: int) -> list[np.ndarray]:
    at = samples.filter(pl.col("threshold") == threshold)
    whole = at["tokens_committed"].to_numpy()
    out = []
    for b in range(n_buckets):
        k = at.filter(pl.col("bucket") == b)["tokens_committed"].to_numpy()
        out.append(k if k.size else whole)  # an empty bucket replays the whole pool, as the replay does
    return out


def tilt_for(
    tokens_by_bucket: list[np.ndarray],
    block_length: int,
    target: float,
    bounds: tuple[float, float] = (-4.0, 4.0),
    iters: int = 60,
) -> float:
    """``lam`` whose weights ``exp(-lam * tokens)`` give ``block_length / S`` = ``target``
    tokens per step (bisection: a larger ``lam`` favours small steps, so fewer tokens per step)."""

    def tps(lam: float) -> float:
        w = [np.exp(-lam * (k - k.mean())) for k in tokens_by_bucket]
        return block_length / _block_steps(tokens_by_bucket, w, block_length)

    lo, hi = bounds
    if not tps(hi) <= target <= tps(lo):
        raise ValueError(
            f"published {target:.2f} tokens/step is out of reach of the recorded steps "
            f"({tps(hi):.2f} .. {tps(lo):.2f}): record rollouts whose steps span it"
        )
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if tps(mid) > target else (lo, mid)
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Calibration:
    """Per threshold: the tilt ``lam``, the recorded and the published tokens per step."""

    lam: dict[float, float]
    recorded: dict[float, float]
    target: dict[float, float]


def systematic_resample(weights: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` indices drawn in proportion to ``weights`` by systematic resampling: one uniform
    offset, then evenly spaced points on the weights' CDF. Every index is drawn within one of
    its expected count, so the resampled law meets its target up to rounding, not up to the
    noise of independent draws (which left a small rollout set several percent off)."""
    cdf = np.cumsum(weights / weights.sum())
    points = (rng.random() + np.arange(n)) / n
    return np.minimum(np.searchsorted(cdf, points, side="right"), len(weights) - 1)


def calibrate(
    dynamics: StepDynamics,
    block_length: int,
    oversample: int = 8,
    seed: int = 0,
    targets: Mapping[float, float] | None = None,
) -> tuple[StepDynamics, Calibration]:
    """The embedded dynamics resampled (``oversample`` x the rows of each threshold and
    bucket, drawn with the tilted weights) to the published tokens per step at every
    recorded threshold that has a published value; others are kept as recorded."""
    targets = dict(PUBLISHED_TOKENS_PER_STEP if targets is None else targets)
    rng = np.random.default_rng(seed)
    nb = dynamics.n_buckets
    frames, lams, recorded, target = [], {}, {}, {}
    for t in dynamics.thresholds:
        at = dynamics.samples.filter(pl.col("threshold") == t)
        pools = _pools(dynamics.samples, t, nb)
        recorded[t] = block_length / _block_steps(pools, [np.ones(len(k)) for k in pools], block_length)
        if t not in targets:
            frames.append(at)
            continue
        lam = tilt_for(pools, block_length, targets[t])
        lams[t], target[t] = lam, targets[t]
        for b in range(nb):
            rows = at.filter(pl.col("bucket") == b)
            if rows.height == 0:
                continue
            k = rows["tokens_committed"].to_numpy()
            w = np.exp(-lam * (k - k.mean()))
            frames.append(rows[systematic_resample(w, rows.height * oversample, rng)])
    samples = pl.concat(frames).sort("threshold", "bucket")
    return StepDynamics(samples, nb), Calibration(lams, recorded, target)


def published_quality(
    mean_steps: Mapping[float, float],
    steps_per_token: Mapping[float, float],
    embedded: ThresholdQuality | None = None,
    meta: dict | None = None,
) -> ThresholdQuality:
    """The threshold-quality table of the published law: the published accuracy curve at
    each threshold, with the steps of the law's rollouts. A request whose threshold varied
    is estimated with the embedded model's fitted late weighting (the only measured
    evidence of how per-step changes combine); the uniform-mix row is the curve's own
    step mean (``n`` 0: nothing was decoded)."""
    thr = sorted(float(t) for t in mean_steps)
    fixed = [FixedRow(t, published_accuracy(t), float(mean_steps[t]), float(steps_per_token[t]), 0) for t in thr]
    mean_acc = float(np.mean([r.accuracy for r in fixed]))
    mixed = MixedRow(
        tuple(thr), mean_acc, float(np.mean([r.mean_steps for r in fixed])), float(np.mean(thr)), mean_acc, 0
    )
    lw = embedded.late_weight if embedded is not None else None
    return ThresholdQuality(fixed, mixed, {"law": "llada-8b-published", "label": LABEL, **(meta or {})}, lw)
