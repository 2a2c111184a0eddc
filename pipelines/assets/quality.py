"""What the simulator replays: threshold quality (fixed and mixed) and step dynamics."""

import dagster as dg
import polars as pl
from pydantic import Field

from dilaserve.predict.dynamics import StepDynamics
from dilaserve.predict.prompts import Prompt
from dilaserve.predict.quality import ThresholdQuality
from dilaserve.predict.rollouts import mixed_threshold_jobs, run_rollouts
from pipelines.assets.rollouts import RolloutSet
from pipelines.progress import progress_logger
from pipelines.resources import ArtifactsResource, ModelResource


class QualityConfig(dg.Config):
    seed: int = Field(1, description="seeds the per-step threshold draws of the mixed decode")


@dg.asset(group_name="simulator_inputs")
def threshold_quality(context: dg.AssetExecutionContext, config: QualityConfig, prompt_set: list[Prompt],
                      rollouts: RolloutSet, model_checkpoint: str, model: ModelResource,
                      artifacts: ArtifactsResource) -> dict:
    """Accuracy and steps at each threshold (from the rollouts) and with a random per-step mix."""
    engine = model.engine(model_checkpoint)
    mixed = run_rollouts(engine, mixed_threshold_jobs(prompt_set, rollouts.thresholds), rollouts.block_length,
                         rollouts.batch_size, rollouts.use_cache, seed=config.seed,
                         progress=progress_logger(context, "mixed-threshold decode"))
    table = ThresholdQuality.from_rollouts(rollouts.result.requests, mixed.requests, mixed.steps,
                                           meta={"checkpoint": model_checkpoint, "requests": len(prompt_set)})
    path = table.save(artifacts.paths().threshold_quality)
    context.add_output_metadata({
        "path": str(path),
        "accuracy": dg.MetadataValue.json({f"{r.threshold:g}": r.accuracy for r in table.fixed}),
        "mean_steps": dg.MetadataValue.json({f"{r.threshold:g}": r.mean_steps for r in table.fixed}),
        "mixed_accuracy": table.mixed.accuracy, "mixed_expected": table.mixed.expected_accuracy,
    })
    return table.to_dict()


class DynamicsConfig(dg.Config):
    n_buckets: int = Field(4, ge=1, description="block-progress buckets (share of the block unmasked before a step)")


@dg.asset(group_name="simulator_inputs")
def step_dynamics(context: dg.AssetExecutionContext, config: DynamicsConfig, step_features: pl.DataFrame,
                  artifacts: ArtifactsResource) -> dict:
    """Per threshold and block-progress bucket: tokens committed and confidence statistics per step."""
    dyn = StepDynamics.from_step_table(step_features, config.n_buckets)
    folder = dyn.save(artifacts.paths().dynamics_dir)
    tc = dyn.mean_tokens_per_step()
    context.add_output_metadata({"folder": str(folder), "samples": dyn.samples.height,
                                 "mean_tokens_per_step": dg.MetadataValue.json({f"{k:g}": v for k, v in tc.items()})})
    return {str(k): v for k, v in tc.items()}
