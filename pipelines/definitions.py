"""Dagster definitions of the offline pipeline (docs/architecture.md section 2).

    DAGSTER_HOME=$PWD/data/dagster_home dagster dev                 # UI (or: python -m pipelines dev)
    DAGSTER_HOME=$PWD/data/dagster_home dagster asset materialize -m pipelines.definitions --select '*'

Graph: prompt_set, model_checkpoint -> rollouts -> step_features -> step_predictor, step_dynamics;
rollouts -> threshold_quality; model_checkpoint -> measured_profile;
analytic_profiles stands alone; step_dynamics, rollouts -> published_step_dynamics ->
published_rollouts -> published_step_features -> published_step_predictor, and
published_rollouts, threshold_quality -> published_threshold_quality (the llada-8b-published
law, calibrated to published numbers, under data/artifacts/laws/). Artifacts land in data/artifacts/ (dilaserve.artifacts).
"""

import dagster as dg

from pipelines.assets import predictor, profiles, prompts, published, quality, rollouts
from pipelines.resources import ArtifactsResource, ModelResource

ASSET_MODULES = (prompts, rollouts, predictor, profiles, quality, published)

ASSETS = dg.load_assets_from_modules(list(ASSET_MODULES))
CHECKS = dg.load_asset_checks_from_modules(list(ASSET_MODULES))

defs = dg.Definitions(
    assets=ASSETS,
    asset_checks=CHECKS,
    resources={"model": ModelResource(), "artifacts": ArtifactsResource()},
    # One step at a time in one process: the assets share a few cores (and one model), and
    # a process per step would re-import torch for each of them.
    executor=dg.in_process_executor,
)
