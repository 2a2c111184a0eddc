"""Step dynamics: the empirical step outcomes a simulator replays.

Stored format (folder ``data/artifacts/dynamics/``):

* ``samples.parquet``: one row per recorded step: ``threshold``, ``bucket`` (block-progress
  bucket, 0..n_buckets-1, of the unmasked share of the block *before* the step),
  ``block_length``, ``step_kind``, ``tokens_committed`` and ``step_conf_min .. step_conf_q75``
  (the confidence statistics the step computed, i.e. the request's conf features after it).
* ``summary.json``: ``n_buckets``, bucket edges, and per (threshold, bucket) the count,
  mean / quantiles of tokens committed and mean confidence statistics; plus the mean
  tokens committed per step at each threshold (``T_c`` of the reconfiguration ILP).

A simulator draws a whole row (tokens committed together with its confidence statistics)
for a request at threshold ``t`` whose block is in bucket ``b``: :meth:`StepDynamics.sample`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from dilaserve.predict.rollouts import STEP_CONF_COLUMNS

SAMPLES_FILE = "samples.parquet"
SUMMARY_FILE = "summary.json"


def bucket_of(block_unmasked_ratio, n_buckets: int):
    """Bucket index of the share of the block already unmasked (array or polars expr)."""
    if isinstance(block_unmasked_ratio, pl.Expr):
        return (block_unmasked_ratio * n_buckets).floor().cast(pl.Int64).clip(0, n_buckets - 1)
    return np.clip(np.floor(np.asarray(block_unmasked_ratio) * n_buckets).astype(np.int64), 0, n_buckets - 1)


@dataclass
class StepDynamics:
    samples: pl.DataFrame
    n_buckets: int

    @classmethod
    def from_step_table(cls, table: pl.DataFrame, n_buckets: int = 4) -> StepDynamics:
        if n_buckets < 1:
            raise ValueError(f"n_buckets={n_buckets}: use at least one block-progress bucket")
        samples = table.select(
            "threshold",
            bucket_of(pl.col("block_unmasked_ratio"), n_buckets).alias("bucket"),
            "block_length",
            "step_kind",
            "tokens_committed",
            *STEP_CONF_COLUMNS,
        ).sort("threshold", "bucket")
        return cls(samples, n_buckets)

    def __post_init__(self) -> None:
        # Pools as numpy arrays, so a replayed step is an index draw, not a frame filter.
        self._pools: dict[tuple[float, int], tuple[np.ndarray, np.ndarray]] = {}
        for (t, b), g in self.samples.group_by("threshold", "bucket"):
            self._pools[(float(t), int(b))] = (g["tokens_committed"].to_numpy(), g.select(STEP_CONF_COLUMNS).to_numpy())
        self._whole = {
            float(t): (g["tokens_committed"].to_numpy(), g.select(STEP_CONF_COLUMNS).to_numpy())
            for (t,), g in self.samples.group_by("threshold")
        }
        self._thresholds = np.array(sorted(self._whole))

    @property
    def thresholds(self) -> list[float]:
        return self._thresholds.tolist()

    def sample(self, threshold: float, block_unmasked_ratio: float, rng: np.random.Generator) -> tuple[int, np.ndarray]:
        """(tokens committed, confidence statistics) of one replayed step.

        Uses the nearest recorded threshold; an empty bucket falls back to the threshold's
        whole pool.
        """
        if not self._thresholds.size:
            raise ValueError("no recorded steps to replay: rebuild the step dynamics from a non-empty step table")
        t = float(self._thresholds[np.argmin(np.abs(self._thresholds - threshold))])
        b = int(bucket_of(block_unmasked_ratio, self.n_buckets))
        tokens, conf = self._pools.get((t, b)) or self._whole[t]
        i = int(rng.integers(len(tokens)))
        return int(tokens[i]), conf[i].copy()

    def mean_tokens_per_step(self) -> dict[float, float]:
        """Mean tokens committed per step at each threshold (``T_c``)."""
        agg = self.samples.group_by("threshold").agg(pl.col("tokens_committed").mean()).sort("threshold")
        return dict(zip(agg["threshold"].to_list(), agg["tokens_committed"].to_list()))

    def summary(self) -> dict:
        agg = (
            self.samples.group_by("threshold", "bucket")
            .agg(
                pl.len().alias("n"),
                pl.col("tokens_committed").mean().alias("tokens_mean"),
                *[pl.col("tokens_committed").quantile(q).alias(f"tokens_q{int(q * 100)}") for q in (0.1, 0.5, 0.9)],
                *[pl.col(c).mean().alias(f"{c}_mean") for c in STEP_CONF_COLUMNS],
            )
            .sort("threshold", "bucket")
        )
        return {
            "n_buckets": self.n_buckets,
            "bucket_edges": [i / self.n_buckets for i in range(self.n_buckets + 1)],
            "bucket_of": "floor(block_unmasked_ratio * n_buckets), before the step",
            "mean_tokens_per_step": {str(k): v for k, v in self.mean_tokens_per_step().items()},
            "by_threshold_bucket": agg.to_dicts(),
        }

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.samples.write_parquet(folder / SAMPLES_FILE)
        (folder / SUMMARY_FILE).write_text(json.dumps(self.summary(), indent=1))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> StepDynamics:
        folder = Path(folder)
        summary = json.loads((folder / SUMMARY_FILE).read_text())
        return cls(pl.read_parquet(folder / SAMPLES_FILE), int(summary["n_buckets"]))
