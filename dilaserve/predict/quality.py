"""Threshold quality: the measured speed-quality table, fixed and mixed thresholds.

``fixed``: accuracy, mean steps and steps per output token at each candidate threshold.
``mixed``: the same prompts decoded with every step's threshold drawn uniformly from the
candidates, next to what the fixed rows would predict for that mix (the step-weighted mean
of their accuracies). Their ratio, ``mix_factor``, tells the simulator how far a request
whose threshold changed mid-way departs from that naive estimate, so dynamic-threshold
quality comes from measurement, not assumption.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence, Union

import numpy as np
import polars as pl


@dataclass(frozen=True)
class FixedRow:
    threshold: float
    accuracy: float
    mean_steps: float
    steps_per_token: float
    n: int


@dataclass(frozen=True)
class MixedRow:
    thresholds: tuple[float, ...]
    accuracy: float
    mean_steps: float
    mean_threshold: float
    #: step-weighted mean of the fixed accuracies over the thresholds the steps used
    expected_accuracy: float
    n: int


@dataclass
class ThresholdQuality:
    fixed: list[FixedRow]
    mixed: MixedRow
    meta: dict = field(default_factory=dict)

    @classmethod
    def from_rollouts(cls, fixed_requests: pl.DataFrame, mixed_requests: pl.DataFrame,
                      mixed_steps: pl.DataFrame, meta: dict | None = None) -> "ThresholdQuality":
        """Build from rollout frames: the fixed-threshold requests, and the mixed-threshold
        requests with their steps (``step_threshold`` per step)."""
        agg = fixed_requests.group_by("threshold").agg(
            pl.col("correct").mean().alias("accuracy"), pl.col("steps").mean().alias("mean_steps"),
            (pl.col("steps").sum() / pl.col("output_length").sum()).alias("spt"), pl.len().alias("n"),
        ).sort("threshold")
        fixed = [FixedRow(float(r["threshold"]), float(r["accuracy"]), float(r["mean_steps"]), float(r["spt"]), int(r["n"]))
                 for r in agg.iter_rows(named=True)]
        out = cls(fixed, MixedRow((), 0.0, 0.0, 0.0, 0.0, 0), dict(meta or {}))
        per_request = (
            mixed_steps.with_columns(pl.col("step_threshold").map_batches(
                lambda s: pl.Series(np.interp(s.to_numpy(), [r.threshold for r in fixed], [r.accuracy for r in fixed]))
            ).alias("acc"))
            .group_by("request_id").agg(pl.col("acc").mean())
        )
        out.mixed = MixedRow(
            thresholds=tuple(r.threshold for r in fixed),
            accuracy=float(mixed_requests["correct"].mean()),
            mean_steps=float(mixed_requests["steps"].mean()),
            mean_threshold=float(mixed_requests["mean_threshold"].mean()),
            expected_accuracy=float(per_request["acc"].mean()),
            n=mixed_requests.height,
        )
        return out

    def accuracy(self, threshold: float) -> float:
        """Fixed-threshold accuracy, interpolated between measured thresholds."""
        xs = [r.threshold for r in self.fixed]
        return float(np.interp(threshold, xs, [r.accuracy for r in self.fixed]))

    @property
    def mix_factor(self) -> float:
        """Measured mixed accuracy over its naive estimate (1.0 when that estimate is 0)."""
        e = self.mixed.expected_accuracy
        return self.mixed.accuracy / e if e > 0 else 1.0

    def estimate(self, thresholds_used: Sequence[float]) -> float:
        """Expected accuracy of a request decoded with these per-step thresholds."""
        ts = list(thresholds_used)
        if not ts:
            raise ValueError("no thresholds given: pass the threshold of every step of the request")
        # One interpolation per distinct threshold, not per step (a request has hundreds
        # of steps at a handful of thresholds); the mean is over every step as before.
        acc = {t: self.accuracy(t) for t in set(ts)}
        base = float(np.mean([acc[t] for t in ts]))
        return base if len(set(ts)) == 1 else min(1.0, base * self.mix_factor)

    def to_dict(self) -> dict:
        return {"fixed": [asdict(r) for r in self.fixed], "mixed": asdict(self.mixed),
                "mix_factor": self.mix_factor, "meta": self.meta}

    def save(self, path: Union[str, Path]) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path

    @classmethod
    def load(cls, path: Union[str, Path]) -> "ThresholdQuality":
        d = json.loads(Path(path).read_text())
        m = d["mixed"]
        return cls([FixedRow(**r) for r in d["fixed"]], MixedRow(**{**m, "thresholds": tuple(m["thresholds"])}), d.get("meta", {}))
