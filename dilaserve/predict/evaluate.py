"""Held-out evaluation of step predictors: MAE and mean relative error, overall, per
threshold and per progress decile (how far through its steps a request is)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import polars as pl

from dilaserve.predict.base import StepPredictor
from dilaserve.predict.lgbm import features_of, rows_batch


@dataclass
class Evaluation:
    """``overall``: one row per predictor; ``by_threshold`` / ``by_decile``: one row per
    (predictor, group). Columns: predictor, [threshold | decile], n, mae, rel_err."""

    overall: pl.DataFrame
    by_threshold: pl.DataFrame
    by_decile: pl.DataFrame

    def metric(self, predictor: str, name: str) -> float:
        return float(self.overall.filter(pl.col("predictor") == predictor)[name][0])

    def to_dict(self) -> dict:
        return {k: getattr(self, k).to_dicts() for k in ("overall", "by_threshold", "by_decile")}


def predictions(predictor: StepPredictor, table: pl.DataFrame) -> np.ndarray:
    """Remaining steps for every row of a step table, in one call, at least 1."""
    return np.maximum(predictor.predict_rows(rows_batch(features_of(table))), 1.0)


def evaluate(predictors: Mapping[str, StepPredictor], table: pl.DataFrame) -> Evaluation:
    """Score each predictor on ``table`` (held-out requests)."""
    base = table.select(
        "threshold",
        "label",
        # progress = share of the request's steps already done before this one
        (pl.col("step") * 10 // (pl.col("step") + pl.col("label"))).clip(0, 9).alias("decile"),
    )
    frames = []
    for name, p in predictors.items():
        err = np.abs(predictions(p, table) - base["label"].to_numpy())
        frames.append(
            base.with_columns(
                pl.lit(name).alias("predictor"),
                pl.Series("abs_err", err),
                (pl.Series("abs_err", err) / pl.col("label")).alias("rel"),
            )
        )
    rows = pl.concat(frames)
    agg = [pl.len().alias("n"), pl.col("abs_err").mean().alias("mae"), pl.col("rel").mean().alias("rel_err")]
    return Evaluation(
        overall=rows.group_by("predictor", maintain_order=True).agg(agg),
        by_threshold=rows.group_by("predictor", "threshold").agg(agg).sort("predictor", "threshold"),
        by_decile=rows.group_by("predictor", "decile").agg(agg).sort("predictor", "decile"),
    )
