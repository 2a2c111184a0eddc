"""Per-policy summary of a simulated run."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

#: Keys of the per-policy JSON object the eval and bench commands print.
SUMMARY_KEYS = (
    "slo_attainment",
    "slo_attainment_low",
    "slo_attainment_high",
    "mean_latency_s",
    "p99_latency_s",
    "quality",
    "mean_threshold",
    "goodput",
    "goodput_low",
    "goodput_high",
)


@dataclass(frozen=True)
class PolicySummary:
    """Attributes:
    slo_attainment: share of all requests finished within their SLO (rejected and
        unfinished requests count as misses).
    slo_attainment_low / _high: the same over requests that arrived in the workload's
        ``low`` / ``high`` phase; None when it has no such phase.
    mean_latency_s / p99_latency_s: over finished requests.
    quality: mean per-request quality of finished requests (see the run's estimator).
    mean_threshold: mean over finished requests of each one's mean step threshold.
    goodput: share of all requests that finished within their SLO *and* were correct:
        the mean over all requests of ``met_slo x quality`` (quality in [0, 1] per
        request; rejected and unfinished requests count 0). What a user receives.
    goodput_low / _high: the same over the ``low`` / ``high`` phase; None without one.
    """

    slo_attainment: float
    slo_attainment_low: float | None
    slo_attainment_high: float | None
    mean_latency_s: float
    p99_latency_s: float
    quality: float
    mean_threshold: float
    requests: int
    finished: int
    rejected: int
    goodput: float
    goodput_low: float | None
    goodput_high: float | None

    def as_json(self) -> dict:
        d = asdict(self)
        return {k: (None if isinstance(d[k], float) and math.isnan(d[k]) else d[k]) for k in SUMMARY_KEYS}


def _share(met: pl.Series) -> float | None:
    return float(met.mean()) if met.len() else None


def good(requests: pl.DataFrame) -> pl.Series:
    """Per request, how much of a correct answer arrived in time: ``met_slo x quality``
    (0 for a miss, and for a rejected or unfinished request, which has no quality)."""
    return (requests["met_slo"].cast(pl.Float64) * requests["quality"].fill_null(0.0)).fill_null(0.0)


def _phase_shares(requests: pl.DataFrame, column: pl.Series) -> tuple[float | None, float | None]:
    """Mean of ``column`` over the ``low`` and over the ``high`` phase's requests."""
    phase = requests["phase"]
    return _share(column.filter(phase == "low")), _share(column.filter(phase == "high"))


def summarize(requests: pl.DataFrame) -> PolicySummary:
    """Summary of a run's per-request table (see :meth:`Simulator.run` for its columns)."""
    fin = requests.filter(pl.col("status") == "finished")
    lat = fin["latency_s"].to_numpy()
    nan = float("nan")
    met, goods = requests["met_slo"], good(requests)
    met_low, met_high = _phase_shares(requests, met)
    good_low, good_high = _phase_shares(requests, goods)
    return PolicySummary(
        slo_attainment=_share(met) or 0.0,
        slo_attainment_low=met_low,
        slo_attainment_high=met_high,
        mean_latency_s=float(lat.mean()) if len(lat) else nan,
        p99_latency_s=float(np.quantile(lat, 0.99)) if len(lat) else nan,
        quality=float(fin["quality"].mean()) if fin.height else nan,
        mean_threshold=float(fin["mean_threshold"].mean()) if fin.height else nan,
        requests=requests.height,
        finished=fin.height,
        rejected=int((requests["status"] == "rejected").sum()),
        goodput=_share(goods) or 0.0,
        goodput_low=good_low,
        goodput_high=good_high,
    )
