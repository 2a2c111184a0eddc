"""Latency profiles per TP degree: measured on this host, analytic for real GPUs."""

import json
from pathlib import Path

import dagster as dg
from pydantic import Field

from dilaserve.engine.state import StepKind
from dilaserve.model.checkpoint import family_of
from dilaserve.profile.analytic import EAGER_H200, GPUS, MODELS, ROOFLINE, analytic_profile
from dilaserve.profile.measure import MeasureConfig, measure_profile
from pipelines.metadata import chart, plot, short_path, tidy
from pipelines.plots import latency_profile_plot
from pipelines.resources import ArtifactsResource, ModelResource

_MEASURE = MeasureConfig()


class MeasuredProfileConfig(dg.Config):
    tp_degrees: list[int] = Field(
        default_factory=lambda: list(_MEASURE.tp_degrees), description="TP degrees (ranks) to time"
    )
    recompute_tokens: list[int] = Field(
        default_factory=lambda: list(_MEASURE.recompute_tokens), description="recompute-step batch sizes in tokens"
    )
    cache_tokens: list[int] = Field(
        default_factory=lambda: list(_MEASURE.cache_tokens),
        description="cache-step fed tokens (multiples of block_length)",
    )
    seq_len: int = Field(_MEASURE.seq_len, ge=1, description="tokens per request")
    repeats: int = Field(_MEASURE.repeats, ge=1, description="timed steps per point (median kept)")
    threads_per_rank: int = Field(_MEASURE.threads_per_rank, ge=1, description="CPU threads per rank")

    def measure(self) -> MeasureConfig:
        return MeasureConfig(
            tuple(self.tp_degrees),
            tuple(self.recompute_tokens),
            tuple(self.cache_tokens),
            self.seq_len,
            _MEASURE.block_length,
            self.repeats,
            self.threads_per_rank,
        )


def _is_measurable(checkpoint: str) -> bool:
    """The embedded model and the native LLaDA / Dream modules run real TP ranks here."""
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    return config.get("model_type") == "dila" or family_of(config) is not None


@dg.asset(group_name="profiles")
def measured_profile(
    context: dg.AssetExecutionContext,
    config: MeasuredProfileConfig,
    model_checkpoint: str,
    model: ModelResource,
    artifacts: ArtifactsResource,
) -> dict:
    """Recompute- and cache-step latency vs tokens of the served model (embedded, LLaDA or Dream),
    with real TP ranks."""
    if not _is_measurable(model_checkpoint):
        # Other masked LMs are decoded recompute-only and not sharded: profile them analytically.
        context.log.warning(
            f"{model_checkpoint} is neither the embedded architecture nor LLaDA / Dream: measured profile skipped"
        )
        context.add_output_metadata({"skipped": True})
        return {}
    prof = measure_profile(
        model_checkpoint, config.measure(), device=model.device, name="measured", log=context.log.info
    )
    path = artifacts.paths().measured_profile
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.save(path)
    png = latency_profile_plot({"measured": prof}, path.with_suffix(".png"))
    n = max(config.recompute_tokens)
    context.add_output_metadata(
        tidy(
            {
                "path": short_path(path),
                "chart": latency_chart(prof),
                "plot": plot(context.instance, png, "measured step latency"),
                "plot_path": short_path(png),
                **{f"tp{d}_recompute_ms_at_{n}": prof.latency(d, n) * 1e3 for d in prof.tp_degrees},
            }
        )
    )
    return prof.to_dict()


def latency_chart(prof) -> dg.MetadataValue:
    """Recompute-step latency (ms) at each measured token count, one column per TP degree."""
    tokens = prof.curve(prof.tp_degrees[0], StepKind.RECOMPUTE).tokens
    rows = [(f"{int(n):,}", [prof.latency(d, n, StepKind.RECOMPUTE) * 1e3 for d in prof.tp_degrees]) for n in tokens]
    return chart(rows, [f"TP-{d}" for d in prof.tp_degrees], "tokens (recompute)", unit=" ms")


class AnalyticProfileConfig(dg.Config):
    models: list[str] = Field(default_factory=lambda: sorted(MODELS), description=f"of {sorted(MODELS)}")
    gpus: list[str] = Field(default_factory=lambda: sorted(GPUS), description=f"of {sorted(GPUS)}")
    tp_degrees: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8], description="TP degrees (1, 2, 4, 8 calibrated)"
    )
    block_mode: bool = Field(True, description="also write each model's block-diffusion profile (<model>-<gpu>-block)")


@dg.asset(group_name="profiles")
def analytic_profiles(
    context: dg.AssetExecutionContext, config: AnalyticProfileConfig, artifacts: ArtifactsResource
) -> dict:
    """Calibrated roofline profiles of real checkpoints on real GPUs, one file per (model, GPU),
    and per mode (bidirectional with the dual cache; block diffusion, ``-block``)."""
    paths = artifacts.paths()
    profiles = {}
    modes = (False, True) if config.block_mode else (False,)
    for m in config.models:
        for g in config.gpus:
            for block_causal in modes:
                prof = analytic_profile(m, g, config.tp_degrees, block_causal=block_causal)
                path = paths.analytic_profile(prof.name)
                path.parent.mkdir(parents=True, exist_ok=True)
                prof.save(path)
                profiles[prof.name] = prof
            if g == "h200" and m in EAGER_H200:  # also with the eager engine's host terms, fitted on an H200
                prof = analytic_profile(m, g, config.tp_degrees, eager=True)
                prof.save(paths.analytic_profile(prof.name))
                profiles[prof.name] = prof
    png = latency_profile_plot(profiles, paths.profiles_dir / "analytic" / "analytic.png")
    n = ROOFLINE.calibration_tokens
    ratios = {name: {f"tp{d}": p.latency(d, n) / p.latency(1, n) for d in p.tp_degrees} for name, p in profiles.items()}
    context.add_output_metadata(
        tidy(
            {
                "profiles": sorted(profiles),
                "chart": chart(
                    [(name, [r[f"tp{d}"] for d in config.tp_degrees if f"tp{d}" in r]) for name, r in ratios.items()],
                    [f"TP-{d}" for d in config.tp_degrees],
                    f"step latency vs TP-1 at {n} tokens",
                ),
                "plot": plot(context.instance, png, "analytic step latency"),
                "plot_path": short_path(png),
                "latency_vs_tp1_at_calibration": ratios,
            }
        )
    )
    return {name: p.to_dict() for name, p in profiles.items()}


@dg.asset_check(asset=analytic_profiles, description="stored profiles hit the TP-2/TP-4 calibration targets")
def analytic_profiles_calibrated(artifacts: ArtifactsResource) -> dg.AssetCheckResult:
    from dilaserve.profile.types import LatencyProfile

    n, misses = ROOFLINE.calibration_tokens, {}
    files = sorted((artifacts.paths().profiles_dir / "analytic").glob("*.json"))
    for f in files:
        p = LatencyProfile.load(f)
        for tp, target in ROOFLINE.targets.items():
            got = p.latency(tp, n, StepKind.RECOMPUTE) / p.latency(1, n, StepKind.RECOMPUTE)
            if p.has(tp) and abs(got - target) > 0.01:
                misses[f"{p.name} TP-{tp}"] = got
    return dg.AssetCheckResult(
        passed=bool(files) and not misses, metadata=tidy({"files": len(files), "misses": misses})
    )
