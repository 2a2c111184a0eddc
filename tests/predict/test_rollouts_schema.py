import polars as pl
import pytest
from pandera.errors import SchemaErrors

from dilaserve.predict.rollouts import CONF_COLUMNS, STEP_CONF_COLUMNS
from dilaserve.predict.schema import validate_step_table


def test_rollout_table_passes_schema_and_counts_down(step_table):
    validate_step_table(step_table)
    assert step_table["request_id"].n_unique() == 24
    assert set(step_table["threshold"].unique()) == {0.5, 0.9}
    first = step_table.filter(pl.col("step") == 0)
    # features are those *before* the step: nothing decoded yet at step 0
    assert (first["steps_ratio"] == 0).all() and (first["unmasked_ratio"] == 0).all()
    assert (first.select(CONF_COLUMNS).to_numpy() == 0).all()
    assert (first["step_kind"] == "recompute").all()
    # a step's own confidence statistics become the next row's features
    g = step_table.filter((pl.col("request_id") == step_table["request_id"][0]) & (pl.col("threshold") == 0.5)).sort(
        "step"
    )
    assert g.select(STEP_CONF_COLUMNS).to_numpy()[:-1].tolist() == g.select(CONF_COLUMNS).to_numpy()[1:].tolist()
    assert g["label"].to_list() == list(range(g.height, 0, -1))


def test_lower_threshold_needs_fewer_steps(rollout):
    steps = rollout.requests.group_by("threshold").agg(pl.col("steps").mean()).sort("threshold")["steps"].to_list()
    assert steps[0] < steps[1]


def _broken(table: pl.DataFrame) -> dict[str, pl.DataFrame]:
    skip = pl.col("step") == 2
    return {
        "label does not count down": table.with_columns(
            pl.when(skip).then(pl.col("label") + 1).otherwise(pl.col("label")).alias("label")
        ),
        "duplicated step": table.with_columns(pl.when(skip).then(1).otherwise(pl.col("step")).alias("step")),
        "confidence above 1": table.with_columns(pl.lit(1.5).alias("conf_q75")),
        "unknown step kind": table.with_columns(pl.lit("prefill").alias("step_kind")),
        "threshold out of range": table.with_columns(pl.lit(0.0).alias("threshold")),
        "missing column": table.drop("conf_min"),
        "extra column": table.with_columns(pl.lit(1).alias("oops")),
        "wrong type": table.with_columns(pl.col("label").cast(pl.Float64)),
        "commits more than a block": table.with_columns((pl.col("block_length") + 1).alias("tokens_committed")),
    }


@pytest.mark.parametrize(
    "case",
    [
        "label does not count down",
        "duplicated step",
        "confidence above 1",
        "unknown step kind",
        "threshold out of range",
        "missing column",
        "extra column",
        "wrong type",
        "commits more than a block",
    ],
)
def test_schema_rejects_broken_frame(step_table, case):
    with pytest.raises(SchemaErrors):
        validate_step_table(_broken(step_table)[case])
