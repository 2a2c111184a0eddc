"""A micro configuration of the whole offline graph: a few requests, a few trials, tiny profiles."""

from pathlib import Path

import dagster as dg

from dilaserve.engine import DEFAULT_CHECKPOINT
from pipelines.definitions import ASSETS, CHECKS
from pipelines.resources import ArtifactsResource, ModelResource

MICRO_RUN_CONFIG = {
    "ops": {
        "prompt_set": {"config": {"n_requests": 10, "seed": 3}},
        "rollouts": {"config": {"thresholds": [0.5, 0.9]}},
        "step_predictor": {"config": {"n_trials": 3, "timeout_s": 20, "max_trees": 30}},
        "published_rollouts": {"config": {"repeats": 4}},
        "published_step_predictor": {"config": {"n_trials": 3, "timeout_s": 20, "max_trees": 30}},
        "measured_profile": {
            "config": {
                "tp_degrees": [1, 2],
                "recompute_tokens": [32, 128],
                "cache_tokens": [32, 64],
                "seq_len": 64,
                "repeats": 1,
            }
        },
        "analytic_profiles": {"config": {"models": ["llada-8b"], "gpus": ["h100"], "tp_degrees": [1, 2, 4]}},
    }
}


def materialize_micro(
    folder: Path, checkpoint: Path = DEFAULT_CHECKPOINT, instance: dg.DagsterInstance | None = None
) -> dg.ExecuteInProcessResult:
    """Materialise every asset (and run every check) into ``folder``, recorded in ``instance``
    (an ephemeral one by default)."""
    return dg.materialize(
        [*ASSETS, *CHECKS],
        run_config=MICRO_RUN_CONFIG,
        resources={
            "model": ModelResource(checkpoint=str(checkpoint), threads=1),
            "artifacts": ArtifactsResource(root=str(folder / "artifacts")),
            "io_manager": dg.FilesystemIOManager(base_dir=str(folder / "storage")),
        },
        instance=instance or dg.DagsterInstance.ephemeral(),
    )
