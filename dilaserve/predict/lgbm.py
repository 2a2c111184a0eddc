"""LightGBM remaining-step predictor: training (Optuna-tuned), saving, loading, predicting.

The model regresses ``log(remaining steps / masked tokens left)`` from the 11 features:
relative error is what the controller pays for (a 5-step miss matters on a 10-step request,
not on a 200-step one), a log target turns a squared loss into a relative one, and the
per-token ratio carries over to answers longer than the rollouts' (:data:`TARGET`).

Prediction cost is per call as much as per row, so the control plane predicts every
request at every threshold in one call (docs/architecture.md section 7). The tree budget
(:attr:`TuningConfig.max_trees`, :attr:`TuningConfig.max_leaves`) bounds the per-row cost
of that call. On the synthetic tasks, 32 trees of 16 leaves predict 1,000 requests x 5
thresholds in about 0.5-1.5 us per row on a busy 2-core host; 60 trees of 24 leaves gain
only ~0.005 of relative error for twice the cost. LightGBM's single-threaded predict is
faster than its threaded one at a few thousand rows, where thread start-up dominates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import lightgbm as lgb
import numpy as np
import optuna
import polars as pl

from dilaserve.predict.base import OneShotPredictor, PredictionBatch, StepPredictor
from dilaserve.predict.booster_call import BoosterCall
from dilaserve.predict.features import FEATURE_NAMES

_OUTPUT_LENGTH = FEATURE_NAMES.index("output_length")
_UNMASKED_RATIO = FEATURE_NAMES.index("unmasked_ratio")
#: What the booster regresses. Steps per masked token left, not steps: a request's
#: remaining steps scale with its masked tokens, so the ratio carries over to answers
#: longer than any the rollouts decoded, where trees (which cannot extrapolate) would
#: predict the longest rollout's steps for every longer request.
TARGET = "log(remaining steps / masked tokens left)"


def masked_left(features: np.ndarray) -> np.ndarray:
    """Masked tokens left per feature row (at least 1): output length x (1 - unmasked ratio)."""
    return np.maximum(features[:, _OUTPUT_LENGTH] * (1.0 - features[:, _UNMASKED_RATIO]), 1.0)


BOOSTER_FILE = "booster.txt"
META_FILE = "meta.json"


@dataclass(frozen=True)
class TuningConfig:
    """How the predictor is tuned and trained.

    Attributes:
        n_trials: Optuna trials at most.
        timeout_s: wall-clock bound of the study (it stops after the running trial).
        seed: seeds the request split, the Optuna sampler and LightGBM: same seed, same model.
        test_fraction: share of requests held out for the final evaluation.
        val_fraction: share of the remaining requests used to score Optuna trials.
        max_trees: boosting rounds at most (early stopping picks fewer); bounds predict cost.
        max_leaves: leaves per tree at most; bounds predict cost with ``max_trees``.
        early_stopping_rounds: rounds without validation improvement before stopping.
    """

    n_trials: int = 40
    timeout_s: float = 120.0
    seed: int = 0
    test_fraction: float = 0.2
    val_fraction: float = 0.25
    max_trees: int = 32
    max_leaves: int = 16
    early_stopping_rounds: int = 20

    def __post_init__(self) -> None:
        if self.n_trials < 1:
            raise ValueError(f"n_trials={self.n_trials}: run at least one Optuna trial")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s={self.timeout_s}: give the study a positive time budget")
        for name in ("test_fraction", "val_fraction"):
            v = getattr(self, name)
            if not 0 < v < 1:
                raise ValueError(f"{name}={v}: use a fraction strictly between 0 and 1 (e.g. 0.2)")
        if self.max_trees < 1 or self.max_leaves < 2:
            raise ValueError(
                f"max_trees={self.max_trees}, max_leaves={self.max_leaves}: need at least 1 tree of 2 leaves"
            )


# ------------------------------------------------------------------ data helpers
def features_of(table: pl.DataFrame) -> np.ndarray:
    """The 11 feature columns of a step table, in :data:`FEATURE_NAMES` order."""
    return np.ascontiguousarray(table.select(FEATURE_NAMES).to_numpy().astype(np.float64))


def rows_batch(features: np.ndarray) -> PredictionBatch:
    """Wrap already-crossed feature rows (one row = one request at one threshold)."""
    return PredictionBatch(tuple(str(i) for i in range(len(features))), (float("nan"),), features)


def split_by_request(table: pl.DataFrame, fraction: float, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rest, held_out): every row of a request lands on the same side, never split by row."""
    ids = np.array(sorted(table["request_id"].unique().to_list()))
    if len(ids) < 2:
        raise ValueError(f"only {len(ids)} request(s) in the table: a request split needs at least 2")
    rng = np.random.default_rng(seed)
    n_out = min(len(ids) - 1, max(1, round(fraction * len(ids))))
    held = set(rng.permutation(ids)[:n_out].tolist())
    mask = table["request_id"].is_in(list(held))
    return table.filter(~mask), table.filter(mask)


def oneshot_rates(table: pl.DataFrame) -> dict[float, float]:
    """Historical steps per output token at each threshold (total steps / total length)."""
    per_req = table.group_by("request_id", "threshold").agg(
        pl.col("label").max().alias("steps"), pl.col("output_length").first()
    )
    spt = per_req.group_by("threshold").agg((pl.col("steps").sum() / pl.col("output_length").sum()).alias("spt"))
    return {float(t): float(v) for t, v in zip(spt["threshold"], spt["spt"])}


# ------------------------------------------------------------------ predictor
class LightGBMPredictor(StepPredictor):
    """A LightGBM booster over the 11 features; predicts remaining steps."""

    name = "lightgbm"

    def __init__(self, booster: lgb.Booster, meta: dict | None = None):
        names = tuple(booster.feature_name())
        if names != FEATURE_NAMES:
            raise ValueError(
                f"booster features {names} differ from FEATURE_NAMES {FEATURE_NAMES}: "
                "retrain the predictor with the current feature set"
            )
        self.booster = booster
        self.meta = dict(meta or {})
        self._predict = BoosterCall(booster)

    def predict_rows(self, batch: PredictionBatch) -> np.ndarray:
        return np.exp(self._predict(batch.features)) * masked_left(batch.features)

    def save(self, folder: str | Path) -> Path:
        """Write ``booster.txt`` (LightGBM text) and ``meta.json`` (features, params, metrics)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(folder / BOOSTER_FILE))
        meta = {**self.meta, "features": list(FEATURE_NAMES), "target": TARGET}
        (folder / META_FILE).write_text(json.dumps(meta, indent=1))
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> LightGBMPredictor:
        folder = Path(folder)
        meta = json.loads((folder / META_FILE).read_text())
        if tuple(meta.get("features", ())) != FEATURE_NAMES:
            raise ValueError(
                f"{folder / META_FILE} lists features {meta.get('features')}, not {list(FEATURE_NAMES)}: "
                "retrain the predictor"
            )
        if meta.get("target") != TARGET:
            raise ValueError(
                f"{folder / META_FILE}: the booster regresses {meta.get('target')!r}, this version reads "
                f"{TARGET!r}: retrain the predictor (`make artifacts`)"
            )
        return cls(lgb.Booster(model_file=str(folder / BOOSTER_FILE)), meta)


# ------------------------------------------------------------------ training
@dataclass
class TrainedPredictor:
    predictor: LightGBMPredictor
    oneshot: OneShotPredictor
    #: threshold -> steps per output token, the one-shot baseline's parameters
    oneshot_steps_per_token: dict[float, float]
    train_requests: list[str]
    test_requests: list[str]
    best_params: dict
    n_trials_run: int
    trials: list[dict] = field(default_factory=list)


#: Where the search starts (within the search space of :func:`train_predictor`).
STARTING_PARAMS = {
    "learning_rate": 0.1,
    "num_leaves": 15,
    "min_data_in_leaf": 10,
    "feature_fraction": 0.9,
    "bagging_fraction": 0.9,
    "lambda_l2": 0.1,
}


def _relative_error(pred: np.ndarray, label: np.ndarray) -> float:
    return float(np.mean(np.abs(np.maximum(pred, 1.0) - label) / label))


def _dataset(table: pl.DataFrame) -> lgb.Dataset:
    # A fresh Dataset per trial with feature_pre_filter off: Optuna varies min_data_in_leaf,
    # which a pre-filtered Dataset would silently ignore (docs/architecture.md section 7).
    x = features_of(table)
    return lgb.Dataset(
        x,
        np.log(table["label"].to_numpy().astype(np.float64) / masked_left(x)),
        feature_name=list(FEATURE_NAMES),
        params={"feature_pre_filter": False},
        free_raw_data=False,
    )


def _base_params(seed: int) -> dict:
    return {
        "objective": "regression",
        "verbosity": -1,
        "seed": seed,
        "deterministic": True,
        "force_row_wise": True,
        "num_threads": 1,
        "bagging_freq": 1,
    }


def _train(
    params: dict, train: pl.DataFrame, rounds: int, valid: pl.DataFrame | None = None, early: int = 0
) -> lgb.Booster:
    callbacks = [lgb.early_stopping(early, verbose=False)] if valid is not None and early else []
    dtrain = _dataset(train)
    valid_sets = [_dataset(valid).set_reference(dtrain)] if valid is not None else None
    return lgb.train(params, dtrain, num_boost_round=rounds, valid_sets=valid_sets, callbacks=callbacks)


def train_predictor(
    table: pl.DataFrame,
    cfg: TuningConfig = TuningConfig(),
    on_trial: Callable[[int, float, float], None] | None = None,
) -> TrainedPredictor:
    """Split by request, tune with Optuna on a validation split of the training requests,
    retrain on all training requests with the best parameters.

    ``on_trial(number, value, best)`` reports progress after each trial.
    """
    rest, test = split_by_request(table, cfg.test_fraction, cfg.seed)
    fit, val = split_by_request(rest, cfg.val_fraction, cfg.seed + 1)
    y_val = val["label"].to_numpy().astype(np.float64)
    x_val = features_of(val)

    def objective(trial: optuna.Trial) -> float:
        params = {
            **_base_params(cfg.seed),
            "learning_rate": trial.suggest_float("learning_rate", 0.03, 0.3, log=True),
            "num_leaves": trial.suggest_int("num_leaves", min(4, cfg.max_leaves), cfg.max_leaves),
            "min_data_in_leaf": trial.suggest_int("min_data_in_leaf", 5, 100, log=True),
            "feature_fraction": trial.suggest_float("feature_fraction", 0.6, 1.0),
            "bagging_fraction": trial.suggest_float("bagging_fraction", 0.6, 1.0),
            "lambda_l2": trial.suggest_float("lambda_l2", 1e-3, 10.0, log=True),
        }
        booster = _train(params, fit, cfg.max_trees, val, cfg.early_stopping_rounds)
        trial.set_user_attr("best_iteration", int(booster.best_iteration or cfg.max_trees))
        pred = np.exp(booster.predict(x_val, num_iteration=booster.best_iteration)) * masked_left(x_val)
        return _relative_error(pred, y_val)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Same seed, same sequence of trials; with a timeout the number of trials (and so the
    # result) can still differ between a fast and a slow machine.
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=cfg.seed))
    # First trial: a conventional setting, so even a study of a few trials has a sane candidate.
    study.enqueue_trial({**STARTING_PARAMS, "num_leaves": min(STARTING_PARAMS["num_leaves"], cfg.max_leaves)})
    callbacks = [lambda s, t: on_trial(t.number, t.value, s.best_value)] if on_trial else []
    t0 = time.perf_counter()
    study.optimize(objective, n_trials=cfg.n_trials, timeout=cfg.timeout_s, callbacks=callbacks)
    best = study.best_trial
    rounds = int(best.user_attrs["best_iteration"])
    params = {**_base_params(cfg.seed), **best.params}
    booster = _train(params, rest, rounds)
    rates = oneshot_rates(rest)
    meta = {
        "oneshot_steps_per_token": {str(k): v for k, v in sorted(rates.items())},
        "params": best.params,
        "num_trees": booster.num_trees(),
        "n_trials": len(study.trials),
        "tuning_seconds": round(time.perf_counter() - t0, 2),
        "val_rel_err": best.value,
        "tuning": asdict(cfg),
        "train_requests": int(rest["request_id"].n_unique()),
        "test_requests": int(test["request_id"].n_unique()),
    }
    return TrainedPredictor(
        predictor=LightGBMPredictor(booster, meta),
        oneshot=OneShotPredictor(rates),
        oneshot_steps_per_token=rates,
        train_requests=sorted(rest["request_id"].unique().to_list()),
        test_requests=sorted(test["request_id"].unique().to_list()),
        best_params=best.params,
        n_trials_run=len(study.trials),
        trials=[{"number": t.number, "value": t.value, **t.params} for t in study.trials if t.value is not None],
    )
