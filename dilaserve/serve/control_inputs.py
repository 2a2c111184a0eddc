"""The control plane's inputs for serving: latency profile, step predictor, step rates.

Each comes from the offline pipeline's artifacts. A missing artifact is not
fatal; the documented fallbacks keep the server up and say so in the log:

* profile: the pipeline's measured profile, else a quick measurement of the
  served model at start-up, at every TP degree the cluster may use (a few
  seconds per degree on CPU);
* predictor: the tuned LightGBM predictor, else the one-shot baseline fitted
  by the pipeline, else a one-shot baseline with conservative built-in rates;
* the step law (expected steps per block per threshold; load control's capacity and
  stage 1 of reconfiguration): from the recorded step dynamics, else the
  threshold-quality table's steps per token, else built-in defaults.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from dilaserve import artifacts
from dilaserve.control.step_law import StepLaw
from dilaserve.predict.base import OneShotPredictor, StepPredictor
from dilaserve.predict.quality import ThresholdQuality
from dilaserve.predict.replay import ReplayTable
from dilaserve.profile.types import LatencyProfile

log = logging.getLogger(__name__)

#: Conservative steps per output token by threshold, used when no rollouts exist.
DEFAULT_STEPS_PER_TOKEN = {0.5: 0.35, 0.6: 0.4, 0.7: 0.5, 0.8: 0.6, 0.9: 0.75, 1.0: 1.0}


@dataclass
class ControlInputs:
    profile: LatencyProfile
    predictor: StepPredictor
    oneshot: OneShotPredictor
    #: None only when neither the step dynamics nor the threshold-quality table exist.
    step_law: StepLaw | None
    notes: list[str]
    #: Measured accuracy per candidate threshold, for the quality budget (None: no table).
    accuracy: dict[float, float] | None = None
    #: The recorded step law and quality table the operating-point tuner replays on (None:
    #: either is missing, and a tuning policy stays at its configured operating point).
    replay: tuple[ReplayTable, ThresholdQuality] | None = None


def _rates_for(thresholds) -> dict[float, float]:
    keys = sorted(DEFAULT_STEPS_PER_TOKEN)
    return {t: DEFAULT_STEPS_PER_TOKEN[min(keys, key=lambda k: abs(k - t))] for t in thresholds}


def quick_profile(checkpoint: str, device: str, tp_degrees=(1,)) -> LatencyProfile:
    """A small measurement of ``checkpoint`` at each TP degree (a few seconds each on CPU)."""
    from dilaserve.profile.measure import MeasureConfig, measure_profile

    cfg = MeasureConfig(
        tp_degrees=tuple(tp_degrees), recompute_tokens=(64, 128, 512, 1024), cache_tokens=(32, 128, 512), repeats=2
    )
    return measure_profile(checkpoint, cfg, device=device, name="startup-quick")


def load_control_inputs(
    checkpoint: str,
    device: str,
    thresholds,
    artifacts_root: str,
    tp_degrees=(1,),
    block_length: int = 32,
    block_causal: bool = False,
) -> ControlInputs:
    """What the control plane needs for ``checkpoint``, from the artifacts built for it (its
    law's folder under ``artifacts_root`` where it has one), with a noted fallback for each
    missing piece. ``block_causal`` prices the step law as block diffusion."""
    notes: list[str] = []
    artifacts_root = str(artifacts.root_for_checkpoint(checkpoint, artifacts_root))
    paths = artifacts.artifact_paths(artifacts_root)
    profile = LatencyProfile.load(paths.measured_profile) if paths.measured_profile.exists() else None
    if profile is None or not all(profile.has(d) for d in tp_degrees):
        notes.append(
            f"no measured latency profile for TP {list(tp_degrees)} at {paths.measured_profile}: measuring "
            "at start-up (`make artifacts` builds a better one)"
        )
        profile = quick_profile(checkpoint, device, tp_degrees)

    oneshot = None
    try:
        oneshot = artifacts.load_oneshot(artifacts_root)
    except (FileNotFoundError, KeyError, ValueError) as e:
        notes.append(f"no fitted one-shot rates ({type(e).__name__}); using built-in conservative rates")
        oneshot = OneShotPredictor(_rates_for(thresholds))
    try:
        predictor: StepPredictor = artifacts.load_predictor(artifacts_root)
    except (FileNotFoundError, ValueError) as e:
        notes.append(
            f"no LightGBM step predictor ({type(e).__name__}: {str(e).splitlines()[0]}); "
            "falling back to the one-shot predictor"
        )
        predictor = oneshot

    step_law = load_step_law(artifacts_root, thresholds, block_length, notes)
    step_law = step_law.with_family(block_causal) if step_law is not None else None
    accuracy = load_accuracy(artifacts_root, thresholds, notes)
    replay = load_replay(artifacts_root, notes)
    for n in notes:
        log.warning(n)
    return ControlInputs(profile, predictor, oneshot, step_law, notes, accuracy, replay)


def load_replay(artifacts_root: str, notes: list[str]) -> tuple[ReplayTable, ThresholdQuality] | None:
    """What the tuner replays its recent arrivals on: the recorded step dynamics and the
    threshold-quality table; None (noted) without either."""
    try:
        return ReplayTable(artifacts.load_step_dynamics(artifacts_root)), artifacts.load_threshold_quality(
            artifacts_root
        )
    except (FileNotFoundError, ValueError) as e:
        notes.append(
            f"no step dynamics or quality table to replay ({type(e).__name__}): the operating-point tuner is off "
            "and the policy runs at its configured point (`make artifacts` builds both)"
        )
        return None


def load_accuracy(artifacts_root: str, thresholds, notes: list[str]) -> dict[float, float] | None:
    """The served model's measured accuracy at each candidate threshold (the quality budget's
    input), interpolated between measured thresholds; None (noted) without a table."""
    try:
        quality = artifacts.load_threshold_quality(artifacts_root)
    except (FileNotFoundError, ValueError) as e:
        notes.append(
            f"no threshold-quality table ({type(e).__name__}): the quality budget cannot be applied, so "
            "every candidate threshold is allowed (`make artifacts` builds the table)"
        )
        return None
    return {float(t): quality.accuracy(t) for t in thresholds}


def load_step_law(artifacts_root: str, thresholds, block_length: int, notes: list[str]) -> StepLaw | None:
    """The served model's step law: the recorded step dynamics' exact steps per block, else
    ``B x steps per token`` of the threshold-quality table; None (noted) without either."""
    try:
        return StepLaw.from_dynamics(artifacts.load_step_dynamics(artifacts_root), block_length, thresholds)
    except (FileNotFoundError, ValueError) as e:
        notes.append(f"no usable step dynamics ({type(e).__name__}); trying the threshold-quality table")
    try:
        quality = artifacts.load_threshold_quality(artifacts_root)
    except FileNotFoundError:
        notes.append(
            "no step dynamics or threshold-quality table: capacity and reconfiguration use built-in "
            "tokens-per-step rates"
        )
        return None
    return StepLaw.from_steps_per_token({r.threshold: r.steps_per_token for r in quality.fixed}, block_length)
