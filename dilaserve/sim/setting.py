"""A simulated cluster setting: the hardware (profile, nodes, TP degrees) and the control
plane's configuration, plus the offline pieces the policies need (predictors)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dilaserve.cluster.base import InstanceSpec
from dilaserve.control.config import ControlConfig
from dilaserve.control.step_law import StepLaw
from dilaserve.predict.base import OneShotPredictor, StepPredictor
from dilaserve.predict.dynamics import StepDynamics
from dilaserve.predict.quality import ThresholdQuality
from dilaserve.profile.types import LatencyProfile
from dilaserve.reconfig.config import ClusterConfig, MonitorConfig, ReconfigConfig
from dilaserve.reconfig.plan import static_layout


@dataclass(frozen=True)
class Predictors:
    """The offline pieces the policies may ask for: the step predictors ``learned``
    (dilaserve and most ablations) and ``oneshot`` (the one-shot ablation), and the
    threshold-quality table ``quality`` (policies with a quality budget). The oracle is
    built per run by the simulator, which alone knows the truth."""

    learned: StepPredictor | None = None
    oneshot: OneShotPredictor | None = None
    quality: ThresholdQuality | None = None

    def accuracy(self, thresholds) -> dict[float, float] | None:
        """Measured accuracy at each candidate threshold (None without a quality table)."""
        return None if self.quality is None else {float(t): self.quality.accuracy(t) for t in thresholds}


@dataclass(frozen=True)
class ClusterSetting:
    """Attributes:
    name: label in tables and plots (e.g. ``paper``, ``embedded``).
    profile: step latency per TP degree.
    cluster: nodes, GPUs per node, allowed TP degrees, batch limits.
    control: candidate thresholds, the baselines' fixed threshold and the step law
        load control prices capacity with (see :func:`with_dynamics`).
    reconfig: reconfiguration settings (``tokens_per_step`` should come from the
        replayed dynamics' step law: see :func:`with_dynamics`).
    monitor: workload monitor settings.
    initial_tp: every policy starts from a static cluster of this TP degree (the
        baselines stay on it).
    initial_layout: start from these instances instead (a static TP mix, or the slice
        of a live cluster a replay runs on); None: every GPU at ``initial_tp``.
    block_length: denoising block length of the served model.
    block_causal: the served model's family: False for a bidirectional DLM with the dual
        cache, True for block diffusion (a prefill per request, no recompute steps per
        block); the step law, the replayed requests and every cost formula follow it.
    """

    name: str
    profile: LatencyProfile
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    control: ControlConfig = field(default_factory=ControlConfig)
    reconfig: ReconfigConfig = field(default_factory=ReconfigConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    initial_tp: int = 1
    initial_layout: tuple[InstanceSpec, ...] | None = None
    block_length: int = 32
    block_causal: bool = False

    def __post_init__(self) -> None:
        missing = [d for d in self.cluster.tp_degrees if not self.profile.has(d)]
        if missing:
            raise ValueError(
                f"setting {self.name!r}: profile {self.profile.name!r} has no curves for TP {missing}: "
                f"drop them from ClusterConfig.tp_degrees or use a profile that covers them"
            )
        if self.initial_tp not in self.cluster.tp_degrees:
            raise ValueError(
                f"setting {self.name!r}: initial_tp {self.initial_tp} is not an allowed TP "
                f"degree {self.cluster.tp_degrees}"
            )

    def starting_layout(self) -> list[InstanceSpec]:
        """The instances a run starts on: ``initial_layout``, else every GPU at ``initial_tp``."""
        return list(self.initial_layout) if self.initial_layout else static_layout(self.cluster, self.initial_tp)


def with_dynamics(setting: ClusterSetting, dynamics: StepDynamics) -> ClusterSetting:
    """The setting with the step law of ``dynamics`` wherever the control plane prices work:
    load control's capacity and the reconfigurator's ``T_c``."""
    # The exact expected steps per block of the replayed Markov chain (the simulator replays the same pools).
    law = StepLaw.from_dynamics(dynamics, setting.block_length, setting.control.thresholds)
    law = law.with_family(setting.block_causal)
    return replace(
        setting, control=replace(setting.control, step_law=law), reconfig=setting.reconfig.with_step_law(law)
    )
