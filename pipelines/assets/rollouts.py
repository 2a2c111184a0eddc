"""Rollouts at every candidate threshold -> the validated step-feature table."""

from dataclasses import dataclass

import dagster as dg
import polars as pl
from pydantic import Field, field_validator

from dilaserve.control.thresholds import CANDIDATE_THRESHOLDS
from dilaserve.predict.prompts import Prompt
from dilaserve.predict.rollouts import RolloutResult, fixed_threshold_jobs, run_rollouts
from dilaserve.predict.schema import validate_step_table
from pipelines.progress import progress_logger
from pipelines.resources import ArtifactsResource, ModelResource

DEFAULT_THRESHOLDS = list(CANDIDATE_THRESHOLDS)


class RolloutConfig(dg.Config):
    thresholds: list[float] = Field(
        default_factory=lambda: list(DEFAULT_THRESHOLDS),
        description="candidate thresholds; every request is decoded at each",
    )
    block_length: int = Field(32, ge=1, description="tokens per block (real checkpoints: 32)")
    batch_size: int = Field(64, ge=1, description="requests per engine step")
    use_cache: bool = Field(True, description="dual KV cache (cache and recompute steps)")

    @field_validator("thresholds")
    @classmethod
    def _check(cls, v: list[float]) -> list[float]:
        if not v or any(not 0 < t <= 1 for t in v) or len(set(v)) != len(v):
            raise ValueError(f"thresholds {v}: give distinct values in (0, 1], e.g. {DEFAULT_THRESHOLDS}")
        return sorted(v)


@dataclass
class RolloutSet:
    """Rollouts plus the settings later assets must reuse (the mixed-threshold decode)."""

    result: RolloutResult
    thresholds: list[float]
    block_length: int
    batch_size: int
    use_cache: bool


@dg.asset(group_name="rollouts")
def rollouts(
    context: dg.AssetExecutionContext,
    config: RolloutConfig,
    prompt_set: list[Prompt],
    model_checkpoint: str,
    model: ModelResource,
    artifacts: ArtifactsResource,
) -> RolloutSet:
    """Every prompt decoded at every threshold, step by step."""
    engine = model.engine(model_checkpoint)
    jobs = fixed_threshold_jobs(prompt_set, config.thresholds)
    context.log.info(f"decoding {len(prompt_set)} requests x {len(config.thresholds)} thresholds on {model.device}")
    result = run_rollouts(
        engine,
        jobs,
        config.block_length,
        config.batch_size,
        config.use_cache,
        progress=progress_logger(context, "rollouts"),
    )
    path = artifacts.paths().rollout_requests
    path.parent.mkdir(parents=True, exist_ok=True)
    result.requests.write_parquet(path)
    context.add_output_metadata(
        {"steps": result.steps.height, "rollouts": result.requests.height, "requests_path": str(path)}
    )
    return RolloutSet(result, config.thresholds, config.block_length, config.batch_size, config.use_cache)


@dg.asset(group_name="rollouts")
def step_features(
    context: dg.AssetExecutionContext, rollouts: RolloutSet, artifacts: ArtifactsResource
) -> pl.DataFrame:
    """One row per step: progress and confidence features before it, its outcome, steps left."""
    table = validate_step_table(rollouts.result.steps)  # never write a table that breaks the contract
    path = artifacts.paths().step_table
    path.parent.mkdir(parents=True, exist_ok=True)
    table.write_parquet(path)
    per_thr = (
        table.group_by("threshold")
        .agg(pl.col("label").max().alias("max_steps"), pl.len().alias("rows"))
        .sort("threshold")
    )
    context.add_output_metadata(
        {
            "path": str(path),
            "rows": table.height,
            "requests": table["request_id"].n_unique(),
            "per_threshold": dg.MetadataValue.json(per_thr.to_dicts()),
        }
    )
    return table


@dg.asset_check(asset=step_features, description="the stored step table passes the pandera.polars schema")
def step_features_schema(artifacts: ArtifactsResource) -> dg.AssetCheckResult:
    from pandera.errors import SchemaErrors

    path = artifacts.paths().step_table
    try:
        validate_step_table(pl.read_parquet(path))
    except SchemaErrors as e:
        return dg.AssetCheckResult(passed=False, metadata={"path": str(path), "errors": str(e)[:2000]})
    return dg.AssetCheckResult(passed=True, metadata={"path": str(path)})
