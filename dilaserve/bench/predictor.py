"""``python -m dilaserve.bench predictor [--build] [--json]``: remaining-step predictor accuracy and cost.

By default it reads what the offline pipeline wrote (data/artifacts, or
``$DILASERVE_ARTIFACTS``): the step table, the tuned LightGBM predictor and its held-out
requests, and the one-shot baseline fitted on the same training requests. A missing
artifact is an error naming the Dagster command that builds it. ``--build`` instead rolls
out ``--requests`` prompts on the default checkpoint and tunes a predictor in-process
(no artifacts read or written).

Reports, on held-out requests (never seen in training or tuning):

* ``mae`` / ``mae_oneshot``: mean absolute error in steps;
* ``rel_err`` / ``rel_err_oneshot``: mean of |predicted - true| / true;
* ``predict_us_per_row``: median wall time of one batched ``predict`` call over 1,000
  requests x 5 thresholds, divided by its 5,000 rows;
* ``machine``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import polars as pl

from dilaserve.control.thresholds import CANDIDATE_THRESHOLDS
from dilaserve.predict.base import PredictionBatch, StepPredictor
from dilaserve.predict.evaluate import evaluate

from .common import emit, machine_info, ratio

THRESHOLDS = CANDIDATE_THRESHOLDS
N_REQUESTS = 1000


def from_artifacts():
    from dilaserve import artifacts

    table = artifacts.load_step_table()
    held_out = artifacts.load_predictor_evaluation()["test_requests"]
    return table, held_out, artifacts.load_predictor(), artifacts.load_oneshot()


def build(n_requests: int, n_trials: int, seed: int):
    import torch

    from dilaserve.engine import DenoisingEngine
    from dilaserve.predict.lgbm import TuningConfig, train_predictor
    from dilaserve.predict.prompts import synthetic_prompts
    from dilaserve.predict.rollouts import fixed_threshold_jobs, run_rollouts

    torch.set_num_threads(1)  # small steps: extra threads only contend on a busy host
    engine = DenoisingEngine.from_pretrained()
    table = run_rollouts(engine, fixed_threshold_jobs(synthetic_prompts(n_requests, seed), THRESHOLDS)).steps
    trained = train_predictor(table, TuningConfig(n_trials=n_trials, timeout_s=60, seed=seed))
    return table, trained.test_requests, trained.predictor, trained.oneshot


def predict_cost_us_per_row(predictor: StepPredictor, table: pl.DataFrame, repeats: int = 20, seed: int = 0) -> float:
    """One call over 1,000 requests x 5 thresholds; progress features drawn from real steps."""
    from dilaserve.predict.rollouts import PROGRESS_COLUMNS

    rng = np.random.default_rng(seed)
    progress = table.select("output_length", *PROGRESS_COLUMNS).to_numpy()
    progress = progress[rng.integers(len(progress), size=N_REQUESTS)]
    batch = PredictionBatch.build([f"r{i}" for i in range(N_REQUESTS)], progress, THRESHOLDS)
    predictor.predict(batch)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        predictor.predict(batch)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / (N_REQUESTS * len(THRESHOLDS)) * 1e6


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dilaserve.bench predictor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--build", action="store_true", help="roll out and tune in-process instead of reading artifacts")
    p.add_argument("--requests", type=int, default=100, help="with --build: prompts to roll out")
    p.add_argument("--trials", type=int, default=20, help="with --build: Optuna trials")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    args = p.parse_args(argv)

    if args.build:
        table, held_out, predictor, oneshot = build(args.requests, args.trials, args.seed)
    else:
        try:
            table, held_out, predictor, oneshot = from_artifacts()
        except FileNotFoundError as e:
            print(f"{e}\n(or run this benchmark with --build)", file=sys.stderr)
            return 2
    test = table.filter(pl.col("request_id").is_in(held_out))
    ev = evaluate({"lightgbm": predictor, "oneshot": oneshot}, test)
    rel, rel_os = ev.metric("lightgbm", "rel_err"), ev.metric("oneshot", "rel_err")
    result = {
        "mae": round(ev.metric("lightgbm", "mae"), 4),
        "mae_oneshot": round(ev.metric("oneshot", "mae"), 4),
        "rel_err": round(rel, 4),
        "rel_err_oneshot": round(rel_os, 4),
        "rel_err_ratio": ratio(rel, rel_os, 4),
        "predict_us_per_row": round(predict_cost_us_per_row(predictor, table), 3),
        "rel_err_by_threshold": {
            f"{r['threshold']:g}": round(r["rel_err"], 4)
            for r in ev.by_threshold.filter(pl.col("predictor") == "lightgbm").iter_rows(named=True)
        },
        "held_out_requests": len(held_out),
        "held_out_rows": test.height,
        "trees": predictor.booster.num_trees() if hasattr(predictor, "booster") else None,
        "source": "built" if args.build else "artifacts",
        "machine": machine_info(),
    }
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
