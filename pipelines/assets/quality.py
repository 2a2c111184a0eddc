"""What the simulator replays: threshold quality (fixed and varying thresholds) and step dynamics."""

import dagster as dg
import polars as pl
from pydantic import Field

from dilaserve.predict.dynamics import StepDynamics
from dilaserve.predict.prompts import Prompt
from dilaserve.predict.quality import ThresholdQuality
from dilaserve.predict.rollouts import (
    dipped_threshold_jobs,
    mixed_threshold_jobs,
    run_rollouts,
    switched_threshold_jobs,
)
from pipelines.assets.rollouts import RolloutSet
from pipelines.metadata import tidy
from pipelines.progress import progress_logger
from pipelines.resources import ArtifactsResource, ModelResource


class QualityConfig(dg.Config):
    seed: int = Field(1, description="seeds the per-step threshold draws of the varying-threshold decodes")
    dip_prob: float = Field(
        0.3, ge=0.0, le=1.0, description="per-step chance that the dipped decode drops below a request's own threshold"
    )
    switch_repeats: int = Field(
        3,
        ge=1,
        description="switched decodes of the prompt set (each ~3 s on 2 cores); "
        "switches are what tells early steps' thresholds from late ones', so the "
        "late-weighting fit needs several",
    )


@dg.asset(group_name="simulator_inputs")
def threshold_quality(
    context: dg.AssetExecutionContext,
    config: QualityConfig,
    prompt_set: list[Prompt],
    rollouts: RolloutSet,
    model_checkpoint: str,
    model: ModelResource,
    artifacts: ArtifactsResource,
) -> dict:
    """Accuracy and steps at each threshold (from the rollouts), and how varying thresholds
    change it: the prompts decoded again with a uniform per-step mix, with dips below a
    per-request threshold, and with one switch up or down mid-way (the late-weighting fit)."""
    engine = model.engine(model_checkpoint)

    def decode(name: str, jobs, seed: int):
        return run_rollouts(
            engine,
            jobs,
            rollouts.block_length,
            rollouts.batch_size,
            rollouts.use_cache,
            seed=seed,
            progress=progress_logger(context, name),
        )

    thr = rollouts.thresholds
    mixed = decode("mixed-threshold decode", mixed_threshold_jobs(prompt_set, thr), config.seed)
    varied = [
        decode("dipped-threshold decode", dipped_threshold_jobs(prompt_set, thr, config.dip_prob), config.seed + 1)
    ]
    varied += [
        decode(
            f"switched-threshold decode {i + 1}/{config.switch_repeats}",
            switched_threshold_jobs(prompt_set, thr),
            config.seed + 2 + i,
        )
        for i in range(config.switch_repeats)
    ]
    table = ThresholdQuality.from_rollouts(
        rollouts.result.requests,
        mixed.requests,
        mixed.steps,
        meta={"checkpoint": model_checkpoint, "requests": len(prompt_set)},
        varied=[(v.requests, v.steps) for v in varied],
    )
    path = table.save(artifacts.paths().threshold_quality)
    context.add_output_metadata(
        tidy(
            {
                "path": str(path),
                "accuracy": {f"{r.threshold:g}": r.accuracy for r in table.fixed},
                "mean_steps": {f"{r.threshold:g}": r.mean_steps for r in table.fixed},
                "mixed_accuracy": table.mixed.accuracy,
                "mixed_expected": table.mixed.expected_accuracy,
                "late_weight": table.describe(),
            }
        )
    )
    return table.to_dict()


class DynamicsConfig(dg.Config):
    n_buckets: int = Field(4, ge=1, description="block-progress buckets (share of the block unmasked before a step)")


@dg.asset(group_name="simulator_inputs")
def step_dynamics(
    context: dg.AssetExecutionContext, config: DynamicsConfig, step_features: pl.DataFrame, artifacts: ArtifactsResource
) -> dict:
    """Per threshold and block-progress bucket: tokens committed and confidence statistics per step."""
    dyn = StepDynamics.from_step_table(step_features, config.n_buckets)
    folder = dyn.save(artifacts.paths().dynamics_dir)
    tc = dyn.mean_tokens_per_step()
    context.add_output_metadata(
        tidy(
            {
                "folder": str(folder),
                "samples": dyn.samples.height,
                "mean_tokens_per_step": {f"{k:g}": v for k, v in tc.items()},
            }
        )
    )
    return {str(k): v for k, v in tc.items()}
