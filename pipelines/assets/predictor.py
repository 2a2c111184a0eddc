"""The Optuna-tuned LightGBM step predictor, evaluated against the one-shot baseline."""

import json

import dagster as dg
import polars as pl
from pydantic import Field

from dilaserve.artifacts import ArtifactPaths
from dilaserve.predict.evaluate import evaluate
from dilaserve.predict.lgbm import TuningConfig, train_predictor
from pipelines.metadata import chart, plot, short_path, tidy
from pipelines.plots import predictor_error_plot
from pipelines.resources import ArtifactsResource

_TUNING = TuningConfig()


class PredictorConfig(dg.Config):
    n_trials: int = Field(_TUNING.n_trials, ge=1, description="Optuna trials at most")
    timeout_s: float = Field(_TUNING.timeout_s, gt=0, description="Optuna wall-clock budget (seconds)")
    seed: int = Field(_TUNING.seed, description="seeds the request split, the sampler and LightGBM")
    test_fraction: float = Field(
        _TUNING.test_fraction, gt=0, lt=1, description="share of requests held out for evaluation"
    )
    max_trees: int = Field(_TUNING.max_trees, ge=1, description="boosting rounds at most (bounds predict cost)")
    max_leaves: int = Field(_TUNING.max_leaves, ge=2, description="leaves per tree at most (bounds predict cost)")

    def tuning(self) -> TuningConfig:
        return TuningConfig(
            n_trials=self.n_trials,
            timeout_s=self.timeout_s,
            seed=self.seed,
            test_fraction=self.test_fraction,
            max_trees=self.max_trees,
            max_leaves=self.max_leaves,
        )


@dg.asset(group_name="predictor")
def step_predictor(
    context: dg.AssetExecutionContext,
    config: PredictorConfig,
    step_features: pl.DataFrame,
    artifacts: ArtifactsResource,
) -> dict:
    """Booster (text) + metadata + held-out evaluation + error plot under predictor/."""
    return train_and_save(context, config, step_features, artifacts.paths())


def train_and_save(
    context: dg.AssetExecutionContext, config: PredictorConfig, step_features: pl.DataFrame, paths: ArtifactPaths
) -> dict:
    """Tune, evaluate and save a predictor into ``paths`` (any step law's artifact folder)."""

    def on_trial(number: int, value: float, best: float) -> None:
        context.log.info(f"optuna trial {number}: val rel_err {value:.4f} (best {best:.4f})")

    trained = train_predictor(step_features, config.tuning(), on_trial)
    test = step_features.filter(pl.col("request_id").is_in(trained.test_requests))
    ev = evaluate({"lightgbm": trained.predictor, "oneshot": trained.oneshot}, test)
    trained.predictor.save(paths.predictor_dir)
    paths.predictor_evaluation.write_text(
        json.dumps({**ev.to_dict(), "test_requests": trained.test_requests, "trials": trained.trials}, indent=1)
    )
    png = predictor_error_plot(ev.by_decile, ev.by_threshold, paths.predictor_dir / "error_by_decile.png")
    summary = {name: {m: ev.metric(name, m) for m in ("mae", "rel_err")} for name in ("lightgbm", "oneshot")}
    context.add_output_metadata(
        tidy(
            {
                "mae": summary["lightgbm"]["mae"],
                # percent, as the notebooks show it (the evaluation file keeps the fraction)
                "rel_err (%)": 100 * summary["lightgbm"]["rel_err"],
                "mae_oneshot": summary["oneshot"]["mae"],
                "rel_err_oneshot (%)": 100 * summary["oneshot"]["rel_err"],
                "trees": trained.predictor.booster.num_trees(),
                "trials": trained.n_trials_run,
                "best_params": dg.MetadataValue.json(trained.best_params),
                "folder": short_path(paths.predictor_dir),
                "chart": decile_chart(ev.by_decile),
                "plot": plot(context.instance, png, "remaining-step error by progress and by threshold"),
                "plot_path": short_path(png),
            }
        )
    )
    return summary


def decile_chart(by_decile: pl.DataFrame) -> dg.MetadataValue:
    """Mean relative error (%) by progress decile, one column per predictor."""
    names = by_decile["predictor"].unique(maintain_order=True).to_list()
    deciles = sorted(by_decile["decile"].unique().to_list())
    err = {(r["predictor"], r["decile"]): 100 * r["rel_err"] for r in by_decile.iter_rows(named=True)}
    rows = [(f"{10 * d + 5}%", [err.get((n, d), float("nan")) for n in names]) for d in deciles]
    return chart(rows, names, "progress", unit="%")


@dg.asset_check(asset=step_predictor, description="on held-out requests the predictor beats the one-shot baseline")
def predictor_beats_oneshot(artifacts: ArtifactsResource) -> dg.AssetCheckResult:
    return beats_oneshot(artifacts.paths())


def beats_oneshot(paths: ArtifactPaths) -> dg.AssetCheckResult:
    """Passes when the saved predictor's held-out error is below the one-shot baseline's."""
    overall = {r["predictor"]: r for r in json.loads(paths.predictor_evaluation.read_text())["overall"]}
    ours, base = overall["lightgbm"], overall["oneshot"]
    passed = ours["rel_err"] < base["rel_err"] and ours["mae"] < base["mae"]
    return dg.AssetCheckResult(
        passed=passed,
        metadata=tidy(
            {
                "rel_err (%)": 100 * ours["rel_err"],
                "rel_err_oneshot (%)": 100 * base["rel_err"],
                "mae": ours["mae"],
                "mae_oneshot": base["mae"],
                "rel_err_ratio": ours["rel_err"] / base["rel_err"] if base["rel_err"] else float("nan"),
            }
        ),
    )
