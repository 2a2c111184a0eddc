"""One simulated run: the real control plane driven over simulated instances.

:func:`simulate` serves one workload under one policy and records what happens; every
decision is the scheduler's. It knows nothing of how a tuning policy replays its window:
the caller passes the replay in (``evaluator``), so the replay, which itself simulates,
can use this module without a cycle (:class:`~dilaserve.sim.simulator.Simulator` builds
the replay; :class:`~dilaserve.sim.window_replay.WindowReplay` runs it through here).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from dilaserve.cluster.base import InstanceFailed
from dilaserve.control.predictions import StepCalibration
from dilaserve.control.request import TrackedRequest
from dilaserve.control.step_time import KINDS, scale_profile
from dilaserve.predict.base import OraclePredictor, StepPredictor
from dilaserve.schedule.config import SchedulerConfig
from dilaserve.schedule.control_plane import ControlPlaneSpec, build_control_plane
from dilaserve.schedule.control_worker import ClockedWorker, ReplayTimeConfig
from dilaserve.schedule.events import ReconfigTick, RequestArrived, RequestOutcome
from dilaserve.schedule.observer import SchedulerObserver
from dilaserve.schedule.policies import SchedulerPolicy, get_policy
from dilaserve.schedule.tuner import TunerConfig, TuningRecord
from dilaserve.sim.backend import SimBackend, SimBackendConfig
from dilaserve.sim.loop import EventLoop
from dilaserve.sim.metrics import PolicySummary, summarize
from dilaserve.sim.progress import ProgressModel
from dilaserve.sim.setting import ClusterSetting, Predictors
from dilaserve.sim.telemetry import Telemetry
from dilaserve.sim.workload import Workload, WorkloadRequest

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimConfig:
    """Attributes:
    backend: simulated instance timing (launch, migration, latency noise) and failures.
    reconfig_tick_s: simulated seconds between two reconfiguration ticks (policies with
        reconfiguration only). Not the plan's lifetime: a plan is priced over
        ``ReconfigConfig.lifetime_s`` (``plan_lifetime_s``, else ``interval_s``, which is the
        server's tick), so quick runs can tick often and still price plans over minutes.
    telemetry_bin_s: time bin of the threshold-over-time series.
    drain_limit_s: after the last arrival, give up on requests still unfinished this
        much later (they count as SLO misses); guards against a stuck cluster.
    tuner: how a tuning policy's operating-point tuner replays its recent arrivals (on
        this simulator's own step law, through :class:`~dilaserve.sim.window_replay.WindowReplay`).
    step_time_factor: the simulated instances step this many times slower than the
        setting's profile says (a slower or shared machine than the one profiled); the
        control plane still starts from the profile and must learn the difference.
    control: how long the tuner's replays take on simulated time
        (:class:`~dilaserve.schedule.control_worker.ReplayTimeConfig`); by default none,
        and a tuning's point is adopted at the event that asked for it.
    """

    backend: SimBackendConfig = field(default_factory=SimBackendConfig)
    reconfig_tick_s: float = 300.0
    telemetry_bin_s: float = 60.0
    drain_limit_s: float = 3600.0
    tuner: TunerConfig = field(default_factory=TunerConfig)
    step_time_factor: float = 1.0
    control: ReplayTimeConfig = field(default_factory=ReplayTimeConfig)

    def __post_init__(self) -> None:
        if not self.step_time_factor > 0:
            raise ValueError(
                f"SimConfig.step_time_factor={self.step_time_factor} must be positive (1.0: the instances "
                "step as profiled; 1.5: 1.5x slower, as on a loaded machine)"
            )
        if self.reconfig_tick_s <= 0:
            raise ValueError(f"SimConfig.reconfig_tick_s={self.reconfig_tick_s} must be positive seconds")
        if self.drain_limit_s <= 0:
            raise ValueError("SimConfig.drain_limit_s must be positive seconds")


@dataclass
class SimResult:
    policy: str
    setting: str
    mode: str
    slo_s: float
    requests: pl.DataFrame
    summary: PolicySummary
    threshold_series: pl.DataFrame
    tp_series: pl.DataFrame
    events: int
    wall_s: float
    sim_s: float
    migrations: int
    #: instances launched by reconfiguration plans (0 for a static cluster; replacements of
    #: failed instances are in ``failures``)
    reconfig_launches: int
    quality_estimator: str
    #: ``(time, point)`` of every operating-point tuning (empty for a policy that does not tune).
    tunings: tuple[tuple[float, str], ...] = ()
    #: every tuning with what it weighed: each candidate's replayed goodput, and whether a
    #: rise of the arrival rate tripped it (``python -m dilaserve.eval audit`` reads these)
    tuning_log: tuple[TuningRecord, ...] = ()
    #: ``(time, failed instance, its replacement or None)`` of every instance failure
    #: (``SimBackendConfig.failures``).
    failures: tuple[tuple[float, str, str | None], ...] = ()

    @property
    def sim_speedup(self) -> float:
        return self.sim_s / self.wall_s if self.wall_s > 0 else float("inf")


REQUEST_COLUMNS = {
    "request_id": pl.Utf8,
    "phase": pl.Utf8,
    "tier": pl.Utf8,
    "status": pl.Utf8,
    "arrival_s": pl.Float64,
    "finish_s": pl.Float64,
    "latency_s": pl.Float64,
    "deadline_s": pl.Float64,
    "met_slo": pl.Boolean,
    "prompt_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "steps": pl.Int64,
    "mean_threshold": pl.Float64,
    "quality": pl.Float64,
}


class _RunRecorder(SchedulerObserver):
    """The simulator's observer: every request outcome goes to the run's request table, and
    every instance failure to its list of failures."""

    def __init__(self, record: Callable[[RequestOutcome], None]):
        self._record = record
        self.failures: list[tuple[float, str, str | None]] = []

    def on_outcome(self, outcome: RequestOutcome) -> None:
        self._record(outcome)

    def on_failure(self, event: InstanceFailed, resumed: int, replacement: str | None) -> None:
        self.failures.append((event.time, event.instance_id, replacement))


class BaseSimulator:
    """Runs policies over workloads on one simulated cluster. A tuning policy tunes only
    where :meth:`_window_replay` gives it a replay: this base gives none (the window replay
    runs its pinned candidates here); :class:`~dilaserve.sim.simulator.Simulator` does.

    Args:
    setting: the simulated cluster.
    progress: how requests progress (the recorded replay, or the model).
    predictors: the policies' step predictors and accuracy tables.
    config: the simulator's settings.
    """

    def __init__(
        self,
        setting: ClusterSetting,
        progress: ProgressModel,
        predictors: Predictors = Predictors(),
        config: SimConfig = SimConfig(),
    ):
        family = getattr(progress, "block_causal", None)  # the replay knows it; the model's engine decides
        if family is not None and family != setting.block_causal:
            raise ValueError(
                f"setting {setting.name!r} serves a {'block-causal' if setting.block_causal else 'bidirectional'} "
                f"model but the progress model replays {'block-causal' if family else 'bidirectional'} requests: "
                "build ReplayProgress(..., block_causal=setting.block_causal)"
            )
        self.setting, self.progress, self.predictors, self.config = setting, progress, predictors, config

    def _predictor(self, policy: SchedulerPolicy, live: dict) -> StepPredictor | None:
        kind = policy.predictor
        if kind is None:
            return None
        if kind == "oracle":
            truth = self.progress.expected_remaining
            return OraclePredictor(lambda rid, thr: truth(live[rid][1], thr))
        pred = self.predictors.oneshot if kind == "oneshot" else self.predictors.learned
        if pred is None:
            raise ValueError(
                f"policy {policy.name!r} needs a {kind} step predictor: pass "
                f"Predictors({'oneshot' if kind == 'oneshot' else 'learned'}=...)"
            )
        return pred

    def run(
        self,
        policy: str | SchedulerPolicy,
        workload: Workload,
        slo_s: float,
        give_up: Callable[[tuple, float], bool] | None = None,
        calibration: StepCalibration | None = None,
    ) -> SimResult:
        """Serve ``workload`` under ``policy``; every request gets ``slo_s`` seconds.

        ``give_up`` is called with each request's row as it is recorded (the columns of
        ``REQUEST_COLUMNS``, in order) and the simulated time; once it returns True the run
        stops there and the requests still running count as unfinished (a tuner's replay that can no longer
        beat the best candidate need not run to its end). ``calibration``: the step
        predictions start from it (a tuner's replay of the live control plane)."""
        if slo_s <= 0:
            raise ValueError(f"slo_s={slo_s} must be positive seconds")
        pol = get_policy(policy)
        st, cfg = self.setting, self.config
        loop = EventLoop()
        telemetry = Telemetry(cfg.telemetry_bin_s)
        machine = st.profile
        if cfg.step_time_factor != 1.0:
            f = cfg.step_time_factor
            machine = scale_profile(st.profile, {(tp, k): f for tp in st.profile.tp_degrees for k in KINDS})
        backend = SimBackend(loop, machine, self.progress, cfg.backend, telemetry)
        live: dict[str, tuple[WorkloadRequest, object]] = {}
        rows: list[tuple] = []
        reqs = workload.requests
        gave_up = []

        def record(o: RequestOutcome) -> None:
            wr, state = live.pop(o.request_id)
            rows.append(self._row(wr, state, o))
            self.progress.release(state)
            if len(rows) == len(reqs):
                loop.stop()
            elif give_up is not None and not gave_up and give_up(rows[-1], loop.now):
                gave_up.append(loop.now)
                loop.stop()

        evaluator = self._window_replay(pol)
        spec = ControlPlaneSpec(
            st.profile,
            st.control,
            st.cluster,
            # The planner prices a launch at what the simulated instances take to start.
            reconfig=replace(st.reconfig, launch_time_s=cfg.backend.launch_time_s),
            monitor=st.monitor,
            accuracy=self.predictors.accuracy(st.control.thresholds),
            scheduler=SchedulerConfig(warn_interval_s=300.0),
            tuner=cfg.tuner,
            evaluator=evaluator,
            control_worker=ClockedWorker(evaluator, lambda: loop.now, cfg.control, cfg.tuner.sample)
            if evaluator is not None and cfg.control.on
            else None,
        )
        recorder = _RunRecorder(record)
        sched = build_control_plane(backend, pol, spec, self._predictor(pol, live), recorder)
        if calibration is not None:
            sched.controller.resume_calibration(calibration)
        reconfigurator = sched.reconfigurator
        initial = st.starting_layout()
        with backend.instant_launches():
            sched.start(initial)

        def arrive(i: int) -> None:
            wr = reqs[i]
            state = self.progress.new_state(wr, st.block_length)
            live[wr.request_id] = (wr, state)
            slo = wr.slo_s if wr.slo_s is not None else slo_s
            tracked = TrackedRequest(
                state,
                arrival=wr.arrival,
                deadline=wr.arrival + slo,
                priority=wr.priority,
                min_threshold=wr.min_threshold,
            )
            sched.handle(RequestArrived(loop.now, tracked))
            if i + 1 < len(reqs):
                loop.at(reqs[i + 1].arrival, lambda: arrive(i + 1))

        def tick() -> None:
            sched.handle(ReconfigTick(loop.now))
            if len(rows) < len(reqs):
                loop.at(loop.now + cfg.reconfig_tick_s, tick)

        if reqs:
            loop.at(reqs[0].arrival, lambda: arrive(0))
        if reconfigurator is not None:
            loop.at(cfg.reconfig_tick_s, tick)
        t0 = time.perf_counter()
        loop.run(until=(reqs[-1].arrival if reqs else 0.0) + cfg.drain_limit_s)
        wall = time.perf_counter() - t0
        if live and not gave_up:
            log.warning(
                "%s on %s: %d request(s) unfinished %.0fs after the last arrival; counted as misses",
                pol.name,
                st.name,
                len(live),
                cfg.drain_limit_s,
            )
        if live:
            for rid in sorted(live):
                wr, state = live[rid]
                rows.append(self._row(wr, state, None))
        frame = pl.DataFrame(rows, schema=REQUEST_COLUMNS, orient="row").sort("arrival_s")
        return SimResult(
            policy=pol.name,
            setting=st.name,
            mode=self.progress.name,
            slo_s=slo_s,
            requests=frame,
            summary=summarize(frame),
            threshold_series=telemetry.threshold_series(),
            tp_series=telemetry.tp_series(),
            events=loop.events,
            wall_s=wall,
            sim_s=loop.now,
            migrations=sched.migrations,
            reconfig_launches=backend.launches - len(initial) - sum(r is not None for _, _, r in recorder.failures),
            quality_estimator=self.progress.quality_estimator,
            tunings=tuple((r.time, r.point) for r in sched.tuner.records) if sched.tuner else (),
            tuning_log=tuple(sched.tuner.records) if sched.tuner else (),
            failures=tuple(recorder.failures),
        )

    def _window_replay(self, policy: SchedulerPolicy):
        """The tuner's replay for ``policy``; None here (no tuning)."""
        return None

    def _row(self, wr: WorkloadRequest, state, o: RequestOutcome | None) -> tuple:
        finished = o is not None and o.status == "finished"
        status = o.status if o is not None else "unfinished"
        used = state.thresholds_used
        return (
            wr.request_id,
            wr.phase,
            wr.tier,
            status,
            wr.arrival,
            o.time if finished else None,
            o.latency if finished else None,
            o.deadline if o is not None else None,
            bool(o is not None and o.met_slo),
            wr.prompt_tokens,
            wr.output_tokens,
            state.steps_done,
            float(np.mean(used)) if used else None,
            self.progress.quality(wr, state) if finished else None,
        )
