"""What every experiment needs: options, the loaded artifacts, the cluster settings, and a
helper that runs policies on the simulator."""

from __future__ import annotations

import copy
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from dilaserve import artifacts
from dilaserve.artifacts import BLOCK_LAW, DYNAMICS_LAWS, EMBEDDED_LAW
from dilaserve.control.operating_point import OperatingPoint
from dilaserve.predict.dynamics import StepDynamics
from dilaserve.predict.quality import ThresholdQuality
from dilaserve.predict.replay import ReplayTable
from dilaserve.reconfig.config import ClusterConfig, MonitorConfig
from dilaserve.reconfig.plan import names_a_layout, node_counts_from_text
from dilaserve.schedule.control_worker import ReplayTimeConfig
from dilaserve.schedule.policies import fixed_policy_name, get_policy
from dilaserve.schedule.tuner import TunerConfig
from dilaserve.sim.arrivals import TRACE_LENGTHS, with_lengths
from dilaserve.sim.backend import SimBackendConfig
from dilaserve.sim.capacity import nominal_capacity_rps
from dilaserve.sim.lengths import LENGTH_MODELS
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.scenarios import named_workload
from dilaserve.sim.setting import ClusterSetting, Predictors, with_dynamics
from dilaserve.sim.simulator import SimConfig, SimResult, Simulator
from dilaserve.sim.slo import DEFAULT_SLO_TIERS, parse_slo_tiers
from dilaserve.sim.traces import AZURE_CONV, Trace, load_trace
from dilaserve.utils.cli import nested

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SettingSpec:
    """A named evaluation setting: the hardware, the replayed step law and the workload
    the trace experiments default to there.

    Attributes:
        profile: latency profile (``measured``, or an analytic ``<model>-<gpu>``).
        tp_degrees: TP degrees the 16 slots (4 nodes x 4) may run.
        dynamics: the step law replayed (:data:`dilaserve.artifacts.DYNAMICS_LAWS`):
            ``embedded`` (the embedded model's recorded steps) or ``llada-8b-published``
            (those steps resampled to Fast-dLLM's published LLaDA tokens per step, a what-if
            calibrated to published numbers, not a measurement of LLaDA).
        lengths: the trace experiments' default request lengths (``--lengths``).
        high_load: the trace experiments' default high-phase load (``--high-load``), a
            fraction of nominal capacity.
        block_causal: the served model's family: block diffusion (one prefill per request,
            every other step a block step) rather than a bidirectional DLM with the dual cache.
        slo_law: the step law whose isolated latency at the baselines' threshold defines the
            SLO: the embedded law's (a what-if on another law then keeps the same SLO), or
            None for the law the setting replays (a model of another family has its own).
    """

    profile: str
    tp_degrees: tuple[int, ...]
    dynamics: str = "embedded"
    lengths: str = "trace"
    high_load: float = 0.8
    block_causal: bool = False
    slo_law: str | None = EMBEDDED_LAW


#: The paper's setting: 16 GPUs = 4 nodes x 4, TP {1, 2, 4}, the analytic LLaDA-8B on H100
#: profile, ShareGPT lengths as the paper builds them, the high phase (the trace's peak) at
#: nominal capacity (a static all-TP-1 cluster at threshold 0.9, docs/architecture.md).
PAPER = SettingSpec("llada-8b-h100", (1, 2, 4), "embedded", "sharegpt-paper", 1.0)
SETTINGS = {
    "paper": PAPER,
    # The same, replaying the step law calibrated to Fast-dLLM's published LLaDA numbers.
    "paper-published": replace(PAPER, dynamics="llada-8b-published"),
    # Block diffusion: the block-causal embedded checkpoint's recorded steps on the same
    # cluster, with the same 8B-class model's analytic profile in block mode.
    "block": replace(PAPER, profile="llada-8b-h100-block", dynamics=BLOCK_LAW, block_causal=True, slo_law=None),
    # The same on H200s with this project's eager engine: the analytic profile with host terms
    # fitted to the engine's steps measured on one H200 (dilaserve.profile.analytic.EAGER_H200),
    # not a profile measured on a GPU.
    "paper-h200": replace(PAPER, profile="llada-8b-h200-eager"),
    # The embedded model's measured profile (TP 1 and 2 measured) on the same 16 slots.
    "embedded": SettingSpec("measured", (1, 2), "embedded", "trace", 0.8),
}
#: ``EvalOptions.lengths`` choices: the trace's own token counts, or a length model's draws.
LENGTHS = (TRACE_LENGTHS, *LENGTH_MODELS)
#: The trace experiments' low-load phase, a fraction of nominal capacity.
TRACE_LOW_LOAD = 0.3
#: A quick run's tuner: its interval and window (seconds), for phases of a minute or so. A
#: 15-s window every 10 s replayed a few hundred sampled arrivals per decision, and the
#: candidates' goodputs differ by less than that evidence resolves; 30 s every 20 s replays
#: twice the evidence at the same cost per simulated second, but a rise's tuning replays a
#: whole window (docs/architecture.md, "Operating points").
QUICK_TUNER_INTERVAL_S, QUICK_TUNER_WINDOW_S = 20.0, 30.0


class LawInputs:
    """What the simulator replays for one step law, loaded on first use from the law's
    artifact folder: the recorded (or resampled) step dynamics, their replay table, the
    threshold-quality table, and the predictors trained on rollouts of that law."""

    def __init__(self, name: str, artifacts_root: Path | None = None):
        self.name = name
        self.root = artifacts.law_root(name, artifacts_root)

    def _load(self, loader, asset: str):
        try:
            return loader(self.root)
        except artifacts.MissingArtifactError as e:  # name the law's own asset, not the embedded one's
            raise artifacts.MissingArtifactError(e.path, f"published_{asset}", self.name) from None

    @cached_property
    def dynamics(self) -> StepDynamics:
        return self._load(artifacts.load_step_dynamics, "step_dynamics")

    @cached_property
    def table(self) -> ReplayTable:
        return ReplayTable(self.dynamics)

    @cached_property
    def quality(self) -> ThresholdQuality:
        return self._load(artifacts.load_threshold_quality, "threshold_quality")

    @cached_property
    def predictors(self) -> Predictors:
        return Predictors(
            self._load(artifacts.load_predictor, "step_predictor"),
            self._load(artifacts.load_oneshot, "step_predictor"),
            self.quality,
        )


class _EmbeddedLaw(LawInputs):
    """The embedded law reads the context's own attributes (which tests may inject)."""

    def __init__(self, ctx: EvalContext):
        super().__init__(EMBEDDED_LAW, ctx.options.artifacts)
        self._ctx = ctx

    dynamics = property(lambda self: self._ctx.dynamics)
    table = property(lambda self: self._ctx.table)
    quality = property(lambda self: self._ctx.quality)
    predictors = property(lambda self: self._ctx.predictors)


@dataclass(frozen=True)
class EvalOptions:
    """Attributes:
    quick: a reduced run (short phases, fewer sweep points) that takes minutes.
    settings: which settings to run (``paper``, ``paper-published``, ``embedded``:
        :data:`SETTINGS`).
    trace: trace CSV (Azure format or BurstGPT) for the trace and ablation experiments.
    out: results folder (git-ignored).
    seed: seeds arrivals, replayed outcomes and latency noise.
    seeds: with ``max-rate``: each probe runs once per seed and pools the busiest phase's
        requests of all of them; with ``trace`` (at one load) and ``ablation``: each policy
        runs once per seed and its row pools the requests of all its runs, the JSON's
        ``per_seed`` giving each run's own (None: ``seed`` alone). Near a tuned policy's
        knee one run's criterion moves by about a point with the timing of its tunings, so
        one run's margin or held rate is partly a draw; pooled seeds make it less of one
        (docs/architecture.md, "Capacity at an SLO").
    artifacts: pipeline artifact folder (None: ``$DILASERVE_ARTIFACTS`` or data/artifacts).
    latency_noise: sigma of the multiplicative step-latency noise.
    phase_s: seconds per load phase of the trace and ablation experiments (None: 1 h, or
        75 s when quick); a shorter phase keeps the low/high mix at a fraction of the cost.
    lengths: request lengths of the trace experiments: ``trace`` (the trace's own token
        counts) or a length model (``sharegpt``, ``sharegpt-paper``, ``gsm8k``,
        ``long-prompt``) whose draws (seeded by ``seed``) replace each request's lengths
        while its arrival time stays. Loads are fractions of the nominal capacity for
        the lengths used. None: each setting's own (``sharegpt-paper`` in the paper
        settings, ``trace`` in ``embedded``).
    high_load: the high-load phase's rate as a fraction of nominal capacity (the low
        phase runs at ``TRACE_LOW_LOAD``); above 1 the cluster is overloaded at the
        baselines' threshold, which only a lower threshold can absorb. None: each
        setting's own (1.0 in the paper settings, 0.8 in ``embedded``), and the trace
        experiment also sweeps ``TRACE_LOADS``; given, the trace runs that load alone.
    dynamics: replay this step law in every setting (None: each setting's own).
    policies: run these policies instead of each experiment's own list (None: the list).
    slo_tiers: SLO tiers of the trace experiments, ``NAME:SHARE:SCALE[:FLOOR],...`` (SCALE
        x a request's own isolated TP-1 latency at 0.9; the tighter a tier, the higher its
        priority; FLOOR, optional, a quality floor its requests run at or above), or
        ``default`` for ``interactive:0.3:1.5,standard:0.5:5,batch:0.2:20``; None: one SLO
        for all (5 x the mean isolated latency).
    static_tp: the cluster every policy starts from (and static policies keep): ``1``,
        ``2`` or ``4`` (every GPU at that TP degree), ``stage1`` (the two-stage
        program's plan for the trace's mean load), or one entry per node, its instances'
        TP degrees joined by ``+`` (``4,4,4,2+1+1``); None: TP-1.
    workload: a named workload (``tp-necessary``, :data:`dilaserve.sim.scenarios.NAMED_WORKLOADS`)
        in place of the trace's low and high phase: its SLO tiers (unless ``slo_tiers`` is
        given), its rate curve taken from the trace and its phase lengths (``phase_s``
        overrides them; ``high_load`` sets its busiest phase's load, the others scaled
        with it). None: the low and the high phase.
    hindsight: with ``frontier``: run the static grid on the one workload (threshold x
        admission x static TP mix, and per-tier thresholds with ``--slo-tiers``) and report
        the best static point in hindsight against dilaserve, instead of the load sweep.
    jobs: simulator runs in parallel (processes) where an experiment runs a grid, or seeds (``--seeds``).
    target: with ``max-rate``: the share of its ``criterion`` a policy must hold at a rate (0.9: 90%).
    criterion: with ``max-rate``: what a rate is held on. ``attainment``: the share of the
        busiest phase's requests that met their SLO. ``goodput``: the share answered on time
        and correctly, over the quality of the same requests' answers at threshold 0.9 (a
        policy that holds a rate by answering fast and wrong does not hold it).
    rate_tol: with ``max-rate``: the search stops once the highest rate held and the lowest
        rate missed are within this fraction of each other (0.05: 5%).
    tuner: the operating-point tuner of the policies that tune (``--tuner-*``: its sample,
        hysteresis, rise trigger and the opt-in economies, ``--tuner-rise-onset``,
        ``--tuner-screen``), so a run with one of them is a command others can repeat.
        Its interval and window are ``tuner_interval_s`` and ``tuner_window_s``.
    tuner_interval_s: seconds between two tunings (None: 20 when quick, else the tuner's
        own, 60).
    tuner_window_s: seconds of arrivals a tuning replays (None: 30 when quick, else the
        tuner's own, 60). The regular tunings' cost per simulated second is about the
        window over the interval, so 30 s every 20 s costs what 15 s every 10 s does, on
        twice the evidence per decision; a rise's tuning replays a whole window, so it
        costs twice as much (docs/architecture.md, "Operating points").
    audit_horizon_s: with ``audit``: seconds of arrivals after each tuning its candidates
        are replayed on (None: the tuner's window, ``tuner_window_s``).
    audit_sample: with ``audit``: the share of the cluster (and of the arrivals) the oracle
        replays (1: the whole cluster, without a sample's pooling error; the tuner's own
        ``--tuner-sample`` shows what its slice adds).
    control: how long the tuner's replays take on simulated time (``--control-*``,
        :class:`~dilaserve.schedule.control_worker.ReplayTimeConfig`): by default none, as
        in every recorded run; ``--control-s-per-request 0.001`` makes a run pay what a
        server's tuning takes (docs/architecture.md, "Control beside the step loop").
    """

    quick: bool = False
    settings: tuple[str, ...] = ("paper", "embedded")
    trace: Path = AZURE_CONV
    out: Path = Path("results")
    seed: int = 0
    seeds: tuple[int, ...] | None = None
    artifacts: Path | None = None
    latency_noise: float = 0.05
    phase_s: float | None = None
    lengths: str | None = None
    high_load: float | None = None
    policies: tuple[str, ...] | None = None
    dynamics: str | None = None
    slo_tiers: str | None = None
    static_tp: str | None = None
    workload: str | None = None
    hindsight: bool = False
    jobs: int = 2
    target: float = 0.9
    criterion: str = "attainment"
    rate_tol: float = 0.05
    tuner: TunerConfig = nested(TunerConfig, prefix="tuner", exclude=("interval_s", "window_s"))
    tuner_interval_s: float | None = None
    tuner_window_s: float | None = None
    audit_horizon_s: float | None = None
    audit_sample: float = 1.0
    control: ReplayTimeConfig = nested(ReplayTimeConfig, prefix="control")

    @property
    def run_tuner(self) -> TunerConfig:
        """The tuner the runs use: ``tuner`` at ``tuner_interval_s`` and ``tuner_window_s``
        (by default every 20 s on a 30-s window when quick: phases of a minute or so)."""
        quick = (QUICK_TUNER_INTERVAL_S, QUICK_TUNER_WINDOW_S)
        interval, window = quick if self.quick else (self.tuner.interval_s, self.tuner.window_s)
        # A flag given as 0 must fail validation, not fall back to the default.
        interval = interval if self.tuner_interval_s is None else self.tuner_interval_s
        window = window if self.tuner_window_s is None else self.tuner_window_s
        return replace(self.tuner, interval_s=interval, window_s=window)

    def __post_init__(self) -> None:
        _ = self.run_tuner  # a rise window longer than a quick run's window fails here, as a flag error
        if self.phase_s is not None and self.phase_s <= 0:
            raise ValueError(f"--phase-s {self.phase_s} must be positive: seconds per load phase, e.g. 900")
        if self.lengths is not None and self.lengths not in LENGTHS:
            raise ValueError(
                f"--lengths {self.lengths!r} is unknown: use {TRACE_LENGTHS!r} for the trace's own "
                f"token counts or a length model ({', '.join(LENGTH_MODELS)})"
            )
        if self.high_load is not None and not self.high_load > 0:
            raise ValueError(
                f"--high-load {self.high_load} must be a positive fraction of nominal capacity, "
                "e.g. 0.8 (the default) or 1.2 (overload)"
            )
        if self.dynamics is not None and self.dynamics not in DYNAMICS_LAWS:
            raise ValueError(f"--dynamics {self.dynamics!r} is unknown: use one of {', '.join(DYNAMICS_LAWS)}")
        if self.workload is not None:
            named_workload(self.workload)  # an unknown name fails here, listing the names
        if self.slo_tiers is not None:
            parse_slo_tiers(self.tiers_text)  # a malformed spec fails here, saying how to write it
        if self.static_tp is not None and self.static_tp not in STATIC_TP_MIXES:
            if not names_a_layout(self.static_tp):
                raise ValueError(
                    f"--static-tp {self.static_tp!r} is unknown: use one of {', '.join(STATIC_TP_MIXES)}, "
                    "or one entry per node (e.g. 4,4,4,2+1+1)"
                )
            try:
                node_counts_from_text(self.static_tp)
            except ValueError as e:
                raise ValueError(f"--static-tp: {e}") from None
        if self.jobs < 1:
            raise ValueError(f"--jobs {self.jobs} must be at least 1 (parallel simulator runs; 2 on 2 cores)")
        if not 0 < self.target <= 1:
            raise ValueError(f"--target {self.target} must be an SLO attainment in (0, 1], e.g. 0.9 for 90%")
        if self.criterion not in MAX_RATE_CRITERIA:
            raise ValueError(f"--criterion {self.criterion!r} is unknown: use one of {', '.join(MAX_RATE_CRITERIA)}")
        if self.seeds is not None and (not self.seeds or len(set(self.seeds)) < len(self.seeds)):
            raise ValueError(f"--seeds {' '.join(map(str, self.seeds))} must name distinct seeds, e.g. --seeds 0 1 2")
        if self.audit_horizon_s is not None and not self.audit_horizon_s > 0:
            raise ValueError(
                f"--audit-horizon-s {self.audit_horizon_s} must be positive seconds, e.g. 30 (the quick tuner's window)"
            )
        if not 0 < self.audit_sample <= 1:
            raise ValueError(
                f"--audit-sample {self.audit_sample} must be a share of the cluster in (0, 1], e.g. 1 for all of it"
            )
        if not 0 < self.rate_tol < 1:
            raise ValueError(f"--rate-tol {self.rate_tol} must be a fraction in (0, 1), e.g. 0.05 for rates within 5%")
        for name in self.policies or ():
            resolve_policy(split_mix(name)[0])  # an unknown name fails here, listing the registered ones
            check_mix(name)
        bad = [s for s in self.settings if s not in SETTINGS]
        if bad or not self.settings:
            raise ValueError(f"unknown settings {bad or list(self.settings)}: choose from {sorted(SETTINGS)}")

    @property
    def audit_window_s(self) -> float:
        """Seconds of arrivals an audit replays after each tuning: ``audit_horizon_s``, else
        the tuner's window."""
        return self.audit_horizon_s or self.run_tuner.window_s

    @property
    def run_seeds(self) -> tuple[int, ...]:
        """The seeds a run pools: ``seeds``, else ``seed`` alone."""
        return self.seeds or (self.seed,)

    @property
    def tiers_text(self) -> str | None:
        """``--slo-tiers`` as a spec (``default`` spelled out; a named workload's own tiers
        when not given)."""
        if self.slo_tiers is None and self.workload is not None:
            return named_workload(self.workload).slo_tiers
        return DEFAULT_SLO_TIERS if self.slo_tiers == "default" else self.slo_tiers


#: ``--criterion`` choices of ``max-rate``.
MAX_RATE_CRITERIA = ("attainment", "goodput")

#: ``--static-tp`` choices: every GPU at one TP degree, or stage 1's plan for the mean load.
STATIC_TP_MIXES = ("1", "2", "4", "stage1")


class EvalContext:
    def __init__(self, options: EvalOptions):
        self.options = options

    def with_seed(self, seed: int) -> EvalContext:
        """This context at another seed. What it has loaded (artifacts, predictors, the
        trace file) depends on no seed, so the copy shares it rather than loading it again."""
        if seed == self.options.seed:
            return self
        other = copy.copy(self)
        other.options = replace(self.options, seed=seed)
        return other

    # ------------------------------------------------------------ artifacts
    # The embedded law's inputs (tests inject these); other laws load from their folder.
    @cached_property
    def dynamics(self):
        return artifacts.load_step_dynamics(self.options.artifacts)

    @cached_property
    def table(self) -> ReplayTable:
        return ReplayTable(self.dynamics)

    @cached_property
    def quality(self):
        return artifacts.load_threshold_quality(self.options.artifacts)

    @cached_property
    def predictors(self) -> Predictors:
        return Predictors(
            artifacts.load_predictor(self.options.artifacts),
            artifacts.load_oneshot(self.options.artifacts),
            self.quality,
        )

    def law(self, name: str = EMBEDDED_LAW) -> LawInputs:
        """The replayed inputs of step law ``name`` (loaded once)."""
        cache = self.__dict__.setdefault("_laws", {})
        if name not in cache:
            cache[name] = _EmbeddedLaw(self) if name == EMBEDDED_LAW else LawInputs(name, self.options.artifacts)
        return cache[name]

    def law_of(self, setting: ClusterSetting | str) -> LawInputs:
        """The step law ``setting`` (or the setting of that name) replays (``--dynamics``,
        else the setting's own)."""
        spec = SETTINGS.get(setting if isinstance(setting, str) else setting.name)
        return self.law(self.options.dynamics or (spec.dynamics if spec else EMBEDDED_LAW))

    def slo_law_of(self, setting: ClusterSetting) -> LawInputs:
        """The step law whose isolated latency defines ``setting``'s SLO (``SettingSpec.slo_law``)."""
        spec = SETTINGS.get(setting.name)
        name = spec.slo_law if spec else EMBEDDED_LAW
        return self.law_of(setting) if name is None else self.law(name)

    def lengths_of(self, setting: ClusterSetting) -> str:
        """``--lengths``, else a named workload's own, else the setting's."""
        spec = SETTINGS.get(setting.name)
        named = named_workload(self.options.workload).lengths if self.options.workload else None
        return self.options.lengths or named or (spec.lengths if spec else TRACE_LENGTHS)

    def high_load_of(self, setting: ClusterSetting) -> float:
        spec = SETTINGS.get(setting.name)
        return self.options.high_load or (spec.high_load if spec else SettingSpec.high_load)

    @cached_property
    def _trace_file(self) -> Trace:
        return load_trace(self.options.trace)

    def trace_for(self, setting: ClusterSetting) -> Trace:
        """The trace file, with its lengths replaced as ``setting`` (or ``--lengths``) says."""
        return with_lengths(self._trace_file, self.lengths_of(setting), self.options.seed)

    @property
    def trace(self) -> Trace:
        """The trace with ``--lengths`` applied (the trace's own lengths when not given)."""
        return with_lengths(self._trace_file, self.options.lengths or TRACE_LENGTHS, self.options.seed)

    # ------------------------------------------------------------ settings
    def setting(self, name: str) -> ClusterSetting:
        spec = SETTINGS[name]
        # Quick runs last minutes, so the monitor's window shrinks with the tick interval.
        monitor = MonitorConfig(window_s=60.0) if self.options.quick else MonitorConfig()
        base = ClusterSetting(
            name,
            artifacts.load_profile(spec.profile, self.options.artifacts),
            ClusterConfig(nodes=4, gpus_per_node=4, tp_degrees=spec.tp_degrees),
            monitor=monitor,
            block_causal=spec.block_causal,
        )
        return with_dynamics(base, self.law_of(base).dynamics)

    @property
    def settings(self) -> list[ClusterSetting]:
        return [self.setting(s) for s in self.options.settings]

    def sim_config(self) -> SimConfig:
        backend = SimBackendConfig(latency_noise=self.options.latency_noise, seed=self.options.seed)
        if self.options.quick:
            # Phases of a quick run last ~a minute: tick often enough for reconfiguration to act.
            return SimConfig(
                backend=replace(backend, launch_time_s=5.0),
                reconfig_tick_s=30.0,
                telemetry_bin_s=10.0,
                tuner=self.options.run_tuner,
                control=self.options.control,
            )
        return SimConfig(backend=backend, tuner=self.options.run_tuner, control=self.options.control)

    def simulator(self, setting: ClusterSetting) -> Simulator:
        law = self.law_of(setting)
        progress = ReplayProgress(law.table, law.quality, seed=self.options.seed, block_causal=setting.block_causal)
        return Simulator(setting, progress, law.predictors, self.sim_config())

    def capacity(self, setting: ClusterSetting, prompt_tokens, output_tokens) -> float:
        return nominal_capacity_rps(
            setting, self.law_of(setting).table, prompt_tokens, output_tokens, setting.control.fixed_threshold
        )

    # ------------------------------------------------------------ running
    def run_policies(
        self, setting: ClusterSetting, policies: Sequence[str], workload, slo_s: float, label: str = ""
    ) -> list[SimResult]:
        """One result per policy. A policy that differs from one already run only by its
        name (``fixed@0.9`` is ``infaas``) reuses that run: runs are deterministic."""
        policies = self.options.policies or policies
        out, done, sims = [], {}, {}  # one simulator per operating point pinned (None: the policy's own)
        for name in policies:
            t0 = time.perf_counter()
            base, point = resolve_policy(name)
            same = run_identity(name, setting)
            if same in done:
                res, how = replace(done[same], policy=name), f"same as {done[same].policy}"
            else:
                if point not in sims:
                    sims[point] = self.simulator(with_point(setting, point))
                res = sims[point].run(get_policy(base), workload, slo_s)
                res = done[same] = replace(res, policy=name)
                how = f"{time.perf_counter() - t0:.0f}s wall"
            s = res.summary
            print(
                f"  [{setting.name}{label}] {name:<28} attainment {s.slo_attainment:6.1%}  "
                f"goodput {s.goodput:6.1%}  mean {s.mean_latency_s:6.2f}s  thr {s.mean_threshold:.3f}  "
                f"({len(workload)} req, {how})",
                file=sys.stderr,
                flush=True,
            )
            out.append(res)
        return out


#: How a static point with one threshold per SLO tier is named, as ``frontier --hindsight``
#: reports it: ``tiers(2:0.8,0:0.8,*:0.7)+admission``.
TIER_POINT_PREFIX = "tiers("
#: How a static point on its own TP mix is named, as ``frontier --hindsight`` reports it and
#: ``max-rate`` searches it: ``fixed@0.7+admission tp=4`` (without it: all TP-1, or
#: ``--static-tp``'s cluster).
MIX_SUFFIX = " tp="
#: The TP mixes a ``tp=`` names besides an explicit layout per node (``4,4,1+1+1+1,...``).
NAMED_MIXES = ("1", "2", "4", "stage1")


def split_mix(name: str) -> tuple[str, str | None]:
    """A policy name as (the policy or per-tier point, the TP mix its ``tp=`` names or None)."""
    policy, sep, mix = name.partition(MIX_SUFFIX)
    return (policy, mix) if sep else (name, None)


def is_static(name: str) -> bool:
    """``name`` runs one fixed operating point: a fixed threshold (or one per tier), no
    tuning, no reconfiguration, on the cluster it starts from or the TP mix its ``tp=``
    names. These are the candidates for the best static point; the rest choose as they go."""
    pol = get_policy(resolve_policy(split_mix(name)[0])[0])
    return pol.selection == "fixed" and not pol.reconfig and not pol.tune


def check_mix(name: str) -> None:
    """Raise ValueError, saying how to fix it, where ``name``'s ``tp=`` cannot run: on a
    policy that is not static (it plans its own mix), or naming no mix."""
    policy, mix = split_mix(name)
    if mix is None:
        return
    if not is_static(policy):
        raise ValueError(
            f"policy {name!r}: only a static policy runs on a named TP mix (e.g. fixed@0.7+admission{MIX_SUFFIX}4); "
            f"start {policy} from that cluster with --static-tp {mix}"
        )
    if not (mix in NAMED_MIXES or names_a_layout(mix)):
        raise ValueError(
            f"policy {name!r}: {mix!r} names no TP mix; use one of {', '.join(NAMED_MIXES)} or a layout per "
            f"node (e.g. {policy}{MIX_SUFFIX}4,4,1+1+1+1,1+1+1+1)"
        )


def resolve_policy(name: str) -> tuple[str, OperatingPoint | None]:
    """The registered policy ``name`` runs, and the operating point it pins the setting to:
    ``(name, None)`` for a registered policy; for a static per-tier point as the hindsight
    frontier labels it, ``fixed@DEFAULT`` (with ``+admission`` where the label has it) and
    the point's pins, which is how the frontier ran it."""
    if not name.startswith(TIER_POINT_PREFIX):
        get_policy(name)
        return name, None
    admission = name.endswith("+admission")
    point = OperatingPoint.from_label(name.removesuffix("+admission"))
    if point.default is None or any(t is None for _, t in point.pins):
        raise ValueError(
            f"policy {name!r}: a static per-tier point pins every tier, e.g. tiers(2:0.8,*:0.7)+admission "
            "(no adaptive tier, and a *:TAU for the others)"
        )
    base = fixed_policy_name(point.default)
    get_policy(base)
    return (f"{base}+admission" if admission else base), point


def with_point(setting: ClusterSetting, point: OperatingPoint | None) -> ClusterSetting:
    """``setting`` whose controller runs at ``point`` (unchanged for None)."""
    return setting if point is None else replace(setting, control=replace(setting.control, operating_point=point))


def run_identity(name: str, setting: ClusterSetting) -> tuple:
    """What a run of policy ``name`` on ``setting`` depends on besides the workload: two
    policies equal up to the name once the threshold override is resolved (``fixed@0.9``
    and ``infaas``) make the same, deterministic run."""
    base, point = resolve_policy(name)
    policy = get_policy(base)
    return replace(policy, name="", fixed_threshold=None), policy.control_for(with_point(setting, point).control)
