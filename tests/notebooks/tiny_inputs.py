"""Tiny inputs for the notebooks, built with the library itself: pipeline artifacts from a
few rollouts of the embedded model, and an evaluation results folder from a short simulation."""

from __future__ import annotations

import json
from pathlib import Path

from dilaserve import artifacts
from dilaserve.engine import DenoisingEngine
from dilaserve.eval.context import EvalContext, EvalOptions
from dilaserve.eval.report import write
from dilaserve.predict.evaluate import evaluate
from dilaserve.predict.lgbm import TuningConfig, train_predictor
from dilaserve.predict.prompts import synthetic_prompts
from dilaserve.predict.quality import ThresholdQuality
from dilaserve.predict.rollouts import fixed_threshold_jobs, mixed_threshold_jobs, run_rollouts
from dilaserve.predict.schema import validate_step_table
from tests.eval.builders import tiny_trace_runs
from tests.sim.builders import quality

THRESHOLDS = [0.5, 0.9]


def build_threshold_artifacts(root: Path, n_prompts: int = 4) -> Path:
    """Step table, threshold-quality table and predictor evaluation for ``n_prompts`` short prompts."""
    paths = artifacts.artifact_paths(root)
    prompts = [p for p in synthetic_prompts(4 * n_prompts, seed=1) if p.gen_length == 32][:n_prompts]
    engine = DenoisingEngine.from_pretrained()  # on one torch thread: tests/conftest.py
    fixed = run_rollouts(engine, fixed_threshold_jobs(prompts, THRESHOLDS))
    mixed = run_rollouts(engine, mixed_threshold_jobs(prompts, THRESHOLDS), seed=1)
    table = validate_step_table(fixed.steps)
    paths.step_table.parent.mkdir(parents=True, exist_ok=True)
    table.write_parquet(paths.step_table)
    ThresholdQuality.from_rollouts(fixed.requests, mixed.requests, mixed.steps).save(paths.threshold_quality)
    trained = train_predictor(
        table, TuningConfig(n_trials=1, timeout_s=10, max_trees=5, test_fraction=0.3, val_fraction=0.4)
    )
    held_out = table.filter(table["request_id"].is_in(trained.test_requests))
    ev = evaluate({"lightgbm": trained.predictor, "oneshot": trained.oneshot}, held_out)
    paths.predictor_evaluation.parent.mkdir(parents=True, exist_ok=True)
    paths.predictor_evaluation.write_text(json.dumps(ev.to_dict()))
    return root


def build_eval_results(out: Path) -> Path:
    """``out/trace/``: a 10-second two-phase trace run by three policies on a one-node cluster."""
    runs, dyn = tiny_trace_runs(("infaas", "llumnix", "dilaserve"))
    ctx = EvalContext(EvalOptions(out=out, settings=("paper",)))
    ctx.__dict__.update(dynamics=dyn, quality=quality())  # injected: nothing is loaded from artifacts
    write(runs, ctx)
    return out
