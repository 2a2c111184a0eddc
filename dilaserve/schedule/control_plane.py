"""The control plane, wired in one place for serving and for the simulator.

A :class:`ControlPlaneSpec` names everything the control plane is made of (latency
profile, control and cluster settings, reconfiguration, the quality table's accuracies);
:func:`build_control_plane` turns it and a policy into the threshold controller, the
reconfigurator, the operating-point tuner and the scheduler that holds them, and binds the
scheduler to the backend's events. The HTTP server and the simulator both call it, so a
policy decides the same way against real and simulated instances (docs/architecture.md,
"One control plane"). Every choice a policy makes about which pieces exist (a predictor
or none, a reconfigurator or none, a tuner or none) is made here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dilaserve.cluster.base import Backend
from dilaserve.control.config import ControlConfig
from dilaserve.control.controller import ThresholdController
from dilaserve.control.step_time import StepTimeCalibration, StepTimeConfig, scale_profile
from dilaserve.predict.base import StepPredictor
from dilaserve.profile.types import LatencyProfile
from dilaserve.reconfig.config import ClusterConfig, MonitorConfig, ReconfigConfig
from dilaserve.reconfig.monitor import WorkloadMonitor
from dilaserve.reconfig.reconfigurator import Reconfigurator
from dilaserve.schedule.config import SchedulerConfig
from dilaserve.schedule.control_worker import ControlWorker
from dilaserve.schedule.dispatch import dispatch_policies
from dilaserve.schedule.observer import SchedulerObserver
from dilaserve.schedule.policies import SchedulerPolicy, get_policy
from dilaserve.schedule.scheduler import GlobalScheduler
from dilaserve.schedule.tuner import OperatingPointTuner, TunerConfig, WindowEvaluator

#: The predictor class each policy predictor kind needs, for the error that asks for it.
_PREDICTOR_CLASS = {"oneshot": "OneShotPredictor", "oracle": "OraclePredictor"}


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
    control_worker: runs the tuner's replays beside the step loop (a server's
        :class:`~dilaserve.schedule.control_worker.ProcessWorker`); None: at once, in the
        caller (the simulator).
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
    control_worker: ControlWorker | None = None


def build_controller(
    policy: SchedulerPolicy,
    profile: LatencyProfile,
    control: ControlConfig,
    predictor: StepPredictor | None,
    accuracy: Mapping[float, float] | None = None,
) -> ThresholdController:
    """The threshold controller ``policy`` names, on ``policy``'s own copy of ``control``
    (a ``fixed@TAU`` policy's threshold). A policy without a predictor kind (fixed
    thresholds) gets none, whatever is passed; one that needs a particular kind must be
    given that kind."""
    kind = policy.predictor
    if kind in _PREDICTOR_CLASS and (predictor is None or predictor.name != kind):
        raise ValueError(
            f"policy {policy.name!r} needs a {kind} predictor; got {getattr(predictor, 'name', None)!r}: "
            f"pass predictor={_PREDICTOR_CLASS[kind]}(...)"
        )
    return ThresholdController(
        policy.control_for(control),
        profile,
        predictor if kind is not None else None,
        selection=policy.selection,
        load_control=policy.load_control,
        admission=policy.admission,
        accuracy=accuracy,
        apply_quality_budget=policy.quality_budget,
        step_pricing=policy.step_pricing,
        calibrate=policy.calibrate,
        ration=policy.ration,
        refresh_every_steps=policy.refresh_every_steps,
    )


def build_control_plane(
    backend: Backend,
    policy: SchedulerPolicy | str,
    spec: ControlPlaneSpec,
    predictor: StepPredictor | None = None,
    observer: SchedulerObserver | None = None,
) -> GlobalScheduler:
    """The scheduler for ``policy`` over ``backend``, bound to its events.

    It holds a reconfigurator when both the policy and the spec reconfigure, and a tuner
    when the policy tunes and the spec has a replay to tune on. ``predictor`` is ignored by
    fixed-threshold policies; ``observer`` is told of steps, outcomes, migrations, plans,
    instance changes and failures.
    """
    pol = get_policy(policy)
    calibration = None
    profile = spec.profile
    if pol.learn_step_time:
        # The controller prices on its own copy, rescaled as the machine is learned; the
        # instances' profile (a simulation's truth) and the planner's stay as measured.
        profile = scale_profile(spec.profile, {})
        calibration = StepTimeCalibration(
            profile,
            StepTimeConfig(
                quantile=spec.control.step_time_quantile,
                estimator=spec.control.step_time_estimator,
                hold_s=spec.control.step_time_hold_s,
            ),
        )
    controller = build_controller(pol, profile, spec.control, predictor, spec.accuracy)
    reconfigurator = None
    if pol.reconfig and spec.reconfig is not None:
        reconfigurator = Reconfigurator(spec.cluster, spec.profile, spec.reconfig, WorkloadMonitor(spec.monitor))
    tuner = None
    if pol.tune and spec.evaluator is not None:
        pins = [t for t, ok in zip(controller.config.thresholds, controller.budget_mask.tolist()) if ok]
        placement = dispatch_policies.get(pol.dispatch).fits_by_slack
        tuner = OperatingPointTuner(
            spec.evaluator,
            pins,
            spec.tuner,
            placement=placement,
            admission=controller.admission_on,
            worker=spec.control_worker,
            learned=controller.learned_calibration,
            machine=(lambda: calibration.factors) if calibration is not None else None,
        )
    scheduler = GlobalScheduler(
        backend,
        spec.profile,
        pol,
        controller,
        config=spec.scheduler,
        reconfigurator=reconfigurator,
        tuner=tuner,
        observer=observer,
        step_time=calibration,
    )
    backend.bind(scheduler.handle)
    return scheduler
