"""The ``llada-8b-published`` step law: calibrated to Fast-dLLM's published LLaDA numbers
(a what-if, not a measurement of LLaDA), built by the same path as the embedded model's.

    step_dynamics, rollouts -> published_step_dynamics -> published_rollouts
        -> published_step_features -> published_step_predictor
    published_rollouts, threshold_quality -> published_threshold_quality

Everything lands in ``data/artifacts/laws/llada-8b-published/`` with the root's layout, so
the runtime loaders read it with that folder as their root (``--dynamics llada-8b-published``).
"""

import dagster as dg
import polars as pl
from pydantic import Field

from dilaserve.artifacts import PUBLISHED_LAW
from dilaserve.control.step_law import StepLaw
from dilaserve.predict.dynamics import StepDynamics
from dilaserve.predict.published import LABEL, PUBLISHED_TOKENS_PER_STEP, TOLERANCE, calibrate, published_quality
from dilaserve.predict.quality import ThresholdQuality
from dilaserve.predict.rollouts import RolloutResult
from dilaserve.predict.schema import validate_step_table
from dilaserve.sim.replay_rollouts import replay_rollouts
from pipelines.assets.predictor import PredictorConfig, beats_oneshot, train_and_save
from pipelines.assets.rollouts import RolloutSet
from pipelines.metadata import tidy
from pipelines.resources import ArtifactsResource

GROUP = "published_law"


def _add_metadata(context: dg.AssetExecutionContext, metadata: dict) -> None:
    """The asset page's numbers, rounded for reading (as every asset of the pipeline shows them)."""
    context.add_output_metadata(tidy(metadata))


class PublishedLawConfig(dg.Config):
    oversample: int = Field(
        32,
        ge=1,
        description="resampled steps per recorded step, per threshold and bucket (systematic resampling: the law "
        "meets the published tokens per step up to rounding)",
    )
    seed: int = Field(0, description="seeds the resampling and the replayed rollouts")


class PublishedRolloutConfig(dg.Config):
    repeats: int = Field(
        8,
        ge=1,
        description="replayed rollouts per recorded request and threshold (the "
        "replay is cheap; more of them steady the predictor and the tokens per step)",
    )
    seed: int = Field(0, description="seeds the replayed step draws")


def law_tokens_per_step(dyn: StepDynamics, block_length: int) -> dict[float, float]:
    """``B / S_c`` of the replayed chain: the tokens per step the simulator realises."""
    law = StepLaw.from_dynamics(dyn, block_length)
    return {t: law.tokens_per_step(t) for t in law.thresholds}


@dg.asset(group_name=GROUP)
def published_step_dynamics(
    context: dg.AssetExecutionContext,
    config: PublishedLawConfig,
    step_dynamics: dict,
    rollouts: RolloutSet,
    artifacts: ArtifactsResource,
) -> dict:
    """The embedded model's recorded steps (as the step_dynamics asset buckets them)
    resampled so that each threshold's tokens per step meets Fast-dLLM's published value."""
    embedded = StepDynamics.load(artifacts.paths().dynamics_dir)
    dyn, cal = calibrate(embedded, rollouts.block_length, config.oversample, config.seed)
    folder = dyn.save(artifacts.paths(PUBLISHED_LAW).dynamics_dir)
    got = law_tokens_per_step(dyn, rollouts.block_length)
    _add_metadata(
        context,
        {
            "folder": str(folder),
            "label": LABEL,
            "samples": dyn.samples.height,
            "tokens_per_step": dg.MetadataValue.json(
                {
                    f"{t:g}": {
                        "published": PUBLISHED_TOKENS_PER_STEP.get(t),
                        "law": got[t],
                        "embedded": cal.recorded[t],
                    }
                    for t in got
                }
            ),
            "tilt": dg.MetadataValue.json({f"{t:g}": v for t, v in cal.lam.items()}),
        },
    )
    return {str(t): v for t, v in got.items()}


@dg.asset_check(
    asset=published_step_dynamics,
    description=f"tokens per step within {TOLERANCE:.0%} of the published values at every threshold",
)
def published_tokens_per_step_match(artifacts: ArtifactsResource) -> dg.AssetCheckResult:
    dyn = StepDynamics.load(artifacts.paths(PUBLISHED_LAW).dynamics_dir)
    block = int(dyn.samples["block_length"][0])
    got = law_tokens_per_step(dyn, block)
    err = {f"{t:g}": got[t] / PUBLISHED_TOKENS_PER_STEP[t] - 1 for t in got if t in PUBLISHED_TOKENS_PER_STEP}
    return dg.AssetCheckResult(
        passed=bool(err) and all(abs(e) <= TOLERANCE for e in err.values()),
        metadata=tidy({"relative_error (%)": dg.MetadataValue.json({t: 100 * e for t, e in err.items()})}),
    )


@dg.asset(group_name=GROUP)
def published_rollouts(
    context: dg.AssetExecutionContext,
    config: PublishedRolloutConfig,
    published_step_dynamics: dict,
    rollouts: RolloutSet,
    artifacts: ArtifactsResource,
) -> RolloutResult:
    """The recorded requests' answer lengths decoded by replaying the published law at
    every threshold (:func:`dilaserve.sim.replay_rollouts.replay_rollouts`)."""
    paths = artifacts.paths(PUBLISHED_LAW)
    dyn = StepDynamics.load(paths.dynamics_dir)
    fixed = rollouts.result.requests.filter(pl.col("threshold") == rollouts.thresholds[-1])
    steps, requests = replay_rollouts(
        dyn,
        fixed["output_length"].to_list(),
        rollouts.thresholds,
        rollouts.block_length,
        config.repeats,
        config.seed,
        prefix="published",
    )
    paths.rollout_requests.parent.mkdir(parents=True, exist_ok=True)
    requests.write_parquet(paths.rollout_requests)
    _add_metadata(context, {"steps": steps.height, "rollouts": requests.height, "label": LABEL})
    return RolloutResult(steps, requests)


@dg.asset(group_name=GROUP)
def published_step_features(
    context: dg.AssetExecutionContext, published_rollouts: RolloutResult, artifacts: ArtifactsResource
) -> pl.DataFrame:
    """The published law's step table, under the same contract as the embedded one's."""
    table = validate_step_table(published_rollouts.steps)
    path = artifacts.paths(PUBLISHED_LAW).step_table
    table.write_parquet(path)
    mean = table.group_by("threshold").agg(pl.col("tokens_committed").mean()).sort("threshold")
    _add_metadata(
        context,
        {
            "path": str(path),
            "rows": table.height,
            "mean_tokens_per_step": dg.MetadataValue.json({f"{t:g}": v for t, v in mean.iter_rows()}),
        },
    )
    return table


@dg.asset(group_name=GROUP)
def published_step_predictor(
    context: dg.AssetExecutionContext,
    config: PredictorConfig,
    published_step_features: pl.DataFrame,
    artifacts: ArtifactsResource,
) -> dict:
    """The step predictor of the published law, tuned like the embedded model's."""
    return train_and_save(context, config, published_step_features, artifacts.paths(PUBLISHED_LAW))


@dg.asset_check(
    asset=published_step_predictor, description="on held-out replayed requests the predictor beats one-shot"
)
def published_predictor_beats_oneshot(artifacts: ArtifactsResource) -> dg.AssetCheckResult:
    return beats_oneshot(artifacts.paths(PUBLISHED_LAW))


@dg.asset(group_name=GROUP)
def published_threshold_quality(
    context: dg.AssetExecutionContext,
    published_rollouts: RolloutResult,
    threshold_quality: dict,
    artifacts: ArtifactsResource,
) -> dict:
    """The published accuracy curve at each threshold, with the law's steps; varying
    thresholds are weighted as the embedded model's fit says."""
    req = published_rollouts.requests
    agg = req.group_by("threshold").agg(
        pl.col("steps").mean().alias("mean"), (pl.col("steps").sum() / pl.col("output_length").sum()).alias("spt")
    )
    embedded = ThresholdQuality.load(artifacts.paths().threshold_quality)
    table = published_quality(
        dict(zip(agg["threshold"], agg["mean"])),
        dict(zip(agg["threshold"], agg["spt"])),
        embedded,
        meta={"late_weight_from": "the embedded model's varying-threshold rollouts"},
    )
    path = table.save(artifacts.paths(PUBLISHED_LAW).threshold_quality)
    _add_metadata(
        context,
        {
            "path": str(path),
            "label": LABEL,
            "accuracy": dg.MetadataValue.json({f"{r.threshold:g}": r.accuracy for r in table.fixed}),
        },
    )
    return table.to_dict()
