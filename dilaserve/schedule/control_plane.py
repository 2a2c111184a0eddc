"""The control plane, built in one place for serving and for the simulator.

A :class:`ControlPlaneSpec` names everything the control plane is made of (latency
profile, control and cluster settings, reconfiguration, the quality table's accuracies);
:func:`build_control_plane` turns it and a policy into the scheduler that drives a
backend. The HTTP server and the simulator both call it, so a policy decides the same way
against real and simulated instances (docs/architecture.md, "One control plane").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dilaserve.cluster.base import Backend
from dilaserve.control.config import ControlConfig
from dilaserve.predict.base import StepPredictor
from dilaserve.profile.types import LatencyProfile
from dilaserve.reconfig.config import ClusterConfig, MonitorConfig, ReconfigConfig
from dilaserve.reconfig.monitor import WorkloadMonitor
from dilaserve.reconfig.reconfigurator import Reconfigurator
from dilaserve.schedule.config import SchedulerConfig
from dilaserve.schedule.events import RequestOutcome
from dilaserve.schedule.observer import SchedulerObserver
from dilaserve.schedule.policies import SchedulerPolicy, get_policy
from dilaserve.schedule.scheduler import GlobalScheduler
from dilaserve.schedule.tuner import OperatingPointTuner, TunerConfig, WindowEvaluator


@dataclass(frozen=True)
class ControlPlaneSpec:
    """Attributes:
    profile: step latency per TP degree.
    control: candidate thresholds, quality budget, admission margin, step law.
    cluster: nodes, GPUs per node, TP degrees and batch limits reconfiguration plans for.
    reconfig: reconfiguration settings; None never reconfigures (whatever the policy).
    monitor: how the workload monitor groups and counts requests.
    accuracy: measured accuracy per candidate threshold (the quality budget's input).
    scheduler: scheduler settings that are not part of a policy.
    tuner: how the operating-point tuner replays (policies that ``tune``).
    evaluator: the replay the tuner runs (the simulator's, or the server's from its
        artifacts); None leaves a tuning policy at its configured operating point.
    """

    profile: LatencyProfile
    control: ControlConfig
    cluster: ClusterConfig
    reconfig: ReconfigConfig | None = None
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    accuracy: Mapping[float, float] | None = None
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    tuner: TunerConfig = field(default_factory=TunerConfig)
    evaluator: WindowEvaluator | None = None


def build_control_plane(
    backend: Backend,
    policy: SchedulerPolicy | str,
    spec: ControlPlaneSpec,
    predictor: StepPredictor | None = None,
    on_outcome: Callable[[RequestOutcome], None] | None = None,
    observer: SchedulerObserver | None = None,
) -> GlobalScheduler:
    """The scheduler for ``policy`` over ``backend``, with a reconfigurator when both the
    policy and the spec reconfigure. ``predictor`` is ignored by fixed-threshold policies;
    ``observer`` is told of steps, migrations, plans and instance changes."""
    pol = get_policy(policy)
    reconfigurator = None
    if pol.reconfig and spec.reconfig is not None:
        reconfigurator = Reconfigurator(spec.cluster, spec.profile, spec.reconfig, WorkloadMonitor(spec.monitor))
    sched = GlobalScheduler(
        backend,
        spec.profile,
        pol,
        control=spec.control,
        config=spec.scheduler,
        predictor=predictor if pol.predictor is not None else None,
        reconfigurator=reconfigurator,
        on_outcome=on_outcome,
        accuracy=spec.accuracy,
        observer=observer,
    )
    if pol.tune and spec.evaluator is not None:
        ctl = sched.controller
        pins = [t for t, ok in zip(ctl.config.thresholds, ctl.budget_mask.tolist()) if ok]
        sched.tuner = OperatingPointTuner(spec.evaluator, pins, spec.tuner)
    return sched
