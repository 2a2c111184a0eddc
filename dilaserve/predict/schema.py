"""The step-feature table's contract, as a ``pandera.polars`` schema.

One row per denoising step of a (request, threshold) rollout. Beyond types and ranges, the
label must agree with step order: within a (request, threshold) group the steps are
0..n-1 and the label (steps remaining, this one included) is n - step, so it falls by
exactly one per step and ends at 1.
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl
from pandera.api.polars.types import PolarsData

GROUP = ("request_id", "threshold")

_ratio = dict(ge=0.0, le=1.0)


class StepTableSchema(pa.DataFrameModel):
    request_id: str = pa.Field(str_length={"min_value": 1})
    threshold: float = pa.Field(gt=0.0, le=1.0)
    block_length: int = pa.Field(ge=1)
    output_length: int = pa.Field(ge=1)
    step: int = pa.Field(ge=0)
    label: int = pa.Field(ge=1)
    steps_ratio: float = pa.Field(ge=0.0)
    unmasked_ratio: float = pa.Field(**_ratio)
    block_ratio: float = pa.Field(ge=0.0, lt=1.0)
    block_unmasked_ratio: float = pa.Field(ge=0.0, lt=1.0)
    conf_min: float = pa.Field(**_ratio)
    conf_q25: float = pa.Field(**_ratio)
    conf_median: float = pa.Field(**_ratio)
    conf_mean: float = pa.Field(**_ratio)
    conf_q75: float = pa.Field(**_ratio)
    step_kind: str = pa.Field(isin=["recompute", "cache"])
    tokens_committed: int = pa.Field(ge=1)
    step_conf_min: float = pa.Field(**_ratio)
    step_conf_q25: float = pa.Field(**_ratio)
    step_conf_median: float = pa.Field(**_ratio)
    step_conf_mean: float = pa.Field(**_ratio)
    step_conf_q75: float = pa.Field(**_ratio)

    class Config:
        strict = True  # an unknown column is a producer bug, not an extension
        coerce = False

    @pa.dataframe_check(error="label must count down by one per step to 1 within each (request_id, threshold)")
    def label_counts_down(cls, data: PolarsData) -> pl.LazyFrame:
        n = pl.len().over(GROUP)
        return data.lazyframe.select(
            (pl.col("label") + pl.col("step") == n)
            & (pl.col("step") < n)
            & (pl.col("step").n_unique().over(GROUP) == n)
        )

    @pa.dataframe_check(error="a step commits at most block_length tokens and output_length is whole blocks")
    def within_blocks(cls, data: PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(
            (pl.col("tokens_committed") <= pl.col("block_length"))
            & (pl.col("output_length") % pl.col("block_length") == 0)
        )


def validate_step_table(frame: pl.DataFrame) -> pl.DataFrame:
    """Validate and return ``frame``; raises ``pandera.errors.SchemaErrors`` listing every failure."""
    return StepTableSchema.validate(frame, lazy=True)
