"""Threshold quality: the measured speed-quality table, fixed and varying thresholds.

``fixed``: accuracy, mean steps and steps per output token at each candidate threshold.

A request whose threshold changes mid-way is estimated by :meth:`ThresholdQuality.estimate`
as a *late-weighted* mean of the fixed accuracies at the thresholds its steps used: step
``i`` of ``n`` weighs ``((i + 0.5) / n) ** gamma``. The steps that decide an answer are its
last ones (early steps commit what the model is already sure of, the last ones the tokens
it hesitates on), so a request that slowed down late loses more than one that sped up
early. ``gamma`` (``late_weight``) is fitted by maximum likelihood on rollouts whose
thresholds change per step: a uniform per-step mix, dips below a request's own threshold,
and switches up or down mid-way; a request that never changed threshold gets its fixed
accuracy whatever ``gamma`` is.

``mixed``: the uniform per-step mix (every step's threshold drawn uniformly from the
candidates) next to the plain step-weighted mean of the fixed accuracies; their ratio,
``mix_factor``, is the estimator of tables saved before ``late_weight`` existed (applied in
full to any request whose threshold varied at all, however little); such a table still
loads and estimates that way, with a warning to rebuild it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

log = logging.getLogger(__name__)

#: Saved-table format: 2 adds ``late_weight`` (format-1 tables lack it and estimate the old way).
FORMAT = 2
#: Candidate ``gamma`` values of the maximum-likelihood fit (0 is the plain step mean).
GAMMA_GRID: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(0, 101))


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


def position_weights(n_steps: int, gamma: float) -> np.ndarray:
    """Weight of each of a request's ``n_steps`` steps: ``((i + 0.5) / n) ** gamma``."""
    return ((np.arange(n_steps) + 0.5) / n_steps) ** gamma


def late_weighted_mean(step_accuracy: np.ndarray, gamma: float) -> float:
    """Mean of per-step fixed accuracies, later steps weighing more (``gamma`` 0: plain mean)."""
    w = position_weights(len(step_accuracy), gamma)
    return float(np.dot(w, step_accuracy) / w.sum())


@dataclass(frozen=True)
class LateWeight:
    """The fitted late-weighting of varying-threshold requests.

    Attributes:
        gamma: exponent of the step-position weights (0: every step counts alike).
        accuracy: graded accuracy of the fitting requests.
        expected_accuracy: their mean estimate at ``gamma`` (calibration: close to ``accuracy``).
        step_mean_accuracy: their mean plain step-weighted estimate (``gamma`` 0), for comparison.
        n: requests fitted on (only those whose threshold changed).
    """

    gamma: float
    accuracy: float
    expected_accuracy: float
    step_mean_accuracy: float
    n: int

    @classmethod
    def fit(
        cls, step_accuracy: Sequence[np.ndarray], correct: Sequence[bool], grid: Sequence[float] = GAMMA_GRID
    ) -> LateWeight:
        """Maximum-likelihood ``gamma`` over ``grid``: each request's estimate is the
        probability of its graded outcome (``correct``)."""
        if not step_accuracy:
            raise ValueError(
                "no varying-threshold requests to fit the late weighting on: decode some "
                "prompts with per-step threshold changes (dilaserve.predict.rollouts)"
            )
        y = np.asarray(correct, dtype=np.float64)

        def estimates(g: float) -> np.ndarray:
            return np.array([late_weighted_mean(a, g) for a in step_accuracy])

        def loglik(g: float) -> float:
            p = np.clip(estimates(g), 1e-4, 1 - 1e-4)
            return float(np.sum(y * np.log(p) + (1 - y) * np.log(1 - p)))

        gamma = max(grid, key=loglik)
        return cls(float(gamma), float(y.mean()), float(estimates(gamma).mean()), float(estimates(0.0).mean()), len(y))


def _step_accuracies(steps: pl.DataFrame, requests: pl.DataFrame, accuracy) -> tuple[list[np.ndarray], list[bool]]:
    """Per request of a rollout whose threshold changed: its steps' fixed accuracies, in
    step order, and its graded outcome."""
    seqs = steps.sort("request_id", "step").group_by("request_id", maintain_order=True).agg("step_threshold")
    graded = dict(zip(requests["request_id"], requests["correct"]))
    acc, correct = [], []
    for rid, thresholds in seqs.iter_rows():
        if len(set(thresholds)) > 1:
            acc.append(np.array([accuracy(t) for t in thresholds]))
            correct.append(bool(graded[rid]))
    return acc, correct


@dataclass
class ThresholdQuality:
    fixed: list[FixedRow]
    mixed: MixedRow
    meta: dict = field(default_factory=dict)
    #: None in tables saved before it existed: they estimate with ``mix_factor``.
    late_weight: LateWeight | None = None

    @classmethod
    def from_rollouts(
        cls,
        fixed_requests: pl.DataFrame,
        mixed_requests: pl.DataFrame,
        mixed_steps: pl.DataFrame,
        meta: dict | None = None,
        varied: Sequence[tuple[pl.DataFrame, pl.DataFrame]] = (),
    ) -> ThresholdQuality:
        """Build from rollout frames: the fixed-threshold requests, the uniformly mixed
        requests with their steps (``step_threshold`` per step), and any further
        varying-threshold rollouts as ``(requests, steps)`` pairs. The late weighting is
        fitted on every varying-threshold request of the mixed and ``varied`` rollouts."""
        agg = (
            fixed_requests.group_by("threshold")
            .agg(
                pl.col("correct").mean().alias("accuracy"),
                pl.col("steps").mean().alias("mean_steps"),
                (pl.col("steps").sum() / pl.col("output_length").sum()).alias("spt"),
                pl.len().alias("n"),
            )
            .sort("threshold")
        )
        fixed = [
            FixedRow(float(r["threshold"]), float(r["accuracy"]), float(r["mean_steps"]), float(r["spt"]), int(r["n"]))
            for r in agg.iter_rows(named=True)
        ]
        out = cls(fixed, MixedRow((), 0.0, 0.0, 0.0, 0.0, 0), dict(meta or {}))
        per_request = (
            mixed_steps.with_columns(
                pl.col("step_threshold")
                .map_batches(
                    lambda s: pl.Series(
                        np.interp(s.to_numpy(), [r.threshold for r in fixed], [r.accuracy for r in fixed])
                    )
                )
                .alias("acc")
            )
            .group_by("request_id")
            .agg(pl.col("acc").mean())
        )
        out.mixed = MixedRow(
            thresholds=tuple(r.threshold for r in fixed),
            accuracy=float(mixed_requests["correct"].mean()),
            mean_steps=float(mixed_requests["steps"].mean()),
            mean_threshold=float(mixed_requests["mean_threshold"].mean()),
            expected_accuracy=float(per_request["acc"].mean()),
            n=mixed_requests.height,
        )
        acc, correct = [], []
        for requests, steps in ((mixed_requests, mixed_steps), *varied):
            a, c = _step_accuracies(steps, requests, out.accuracy)
            acc += a
            correct += c
        out.late_weight = LateWeight.fit(acc, correct)
        return out

    def accuracy(self, threshold: float) -> float:
        """Fixed-threshold accuracy, interpolated between measured thresholds."""
        xs = [r.threshold for r in self.fixed]
        return float(np.interp(threshold, xs, [r.accuracy for r in self.fixed]))

    @property
    def mix_factor(self) -> float:
        """Measured uniform-mix accuracy over its plain step-mean estimate (1.0 when that
        estimate is 0); the estimator of tables without ``late_weight``."""
        e = self.mixed.expected_accuracy
        return self.mixed.accuracy / e if e > 0 else 1.0

    def ceiling(self, thresholds: Iterable[float]) -> float:
        """The most :meth:`estimate` gives a request whose every step used one of
        ``thresholds``: a late-weighted mean is at most its largest term; a table without
        ``late_weight`` scales its mean by ``mix_factor`` (capped at 1)."""
        top = max(self.accuracy(t) for t in thresholds)
        if self.late_weight is None:
            return min(1.0, top * max(1.0, self.mix_factor))
        return top

    def estimate(self, thresholds_used: Sequence[float]) -> float:
        """Expected accuracy of a request decoded with these per-step thresholds, in step order."""
        ts = list(thresholds_used)
        if not ts:
            raise ValueError("no thresholds given: pass the threshold of every step of the request")
        # One interpolation per distinct threshold, not per step (a request has hundreds
        # of steps at a handful of thresholds).
        acc = {t: self.accuracy(t) for t in set(ts)}
        if len(acc) == 1:
            return acc[ts[0]]
        step_acc = np.array([acc[t] for t in ts])
        if self.late_weight is None:
            return min(1.0, float(step_acc.mean()) * self.mix_factor)
        return late_weighted_mean(step_acc, self.late_weight.gamma)

    def describe(self) -> dict:
        """What the estimator applies, for reports next to its numbers."""
        if self.late_weight is None:
            return {
                "estimator": "step mean x mix factor (table predates late_weight)",
                "mix_factor": round(self.mix_factor, 4),
                "mixed_n": self.mixed.n,
            }
        lw = self.late_weight
        return {
            "estimator": "late-weighted step mean",
            "gamma": lw.gamma,
            "fit_n": lw.n,
            "fit_accuracy": round(lw.accuracy, 4),
            "fit_expected": round(lw.expected_accuracy, 4),
            "fit_step_mean": round(lw.step_mean_accuracy, 4),
        }

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "fixed": [asdict(r) for r in self.fixed],
            "mixed": asdict(self.mixed),
            "mix_factor": self.mix_factor,
            "late_weight": None if self.late_weight is None else asdict(self.late_weight),
            "meta": self.meta,
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path) -> ThresholdQuality:
        d = json.loads(Path(path).read_text())
        version = d.get("format", 1)
        if version > FORMAT:
            raise ValueError(
                f"{path} is threshold-quality format {version}, newer than this code reads "
                f"({FORMAT}): update dilaserve or rebuild the table (`make artifacts`)"
            )
        m = d["mixed"]
        lw = d.get("late_weight")
        if lw is None:
            log.warning(
                "%s predates the late-weighted estimator: requests whose threshold varied are estimated "
                "with the uniform-mix factor %.3f, which over-penalises small changes; rebuild it "
                "(`make artifacts`)",
                path,
                d.get("mix_factor", float("nan")),
            )
        return cls(
            [FixedRow(**r) for r in d["fixed"]],
            MixedRow(**{**m, "thresholds": tuple(m["thresholds"])}),
            d.get("meta", {}),
            None if lw is None else LateWeight(**lw),
        )
