"""What every experiment needs: options, the loaded artifacts, the cluster settings, and a
helper that runs policies on the simulator."""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Optional, Sequence

from dilaserve import artifacts
from dilaserve.reconfig.config import ClusterConfig, MonitorConfig
from dilaserve.cluster.sim_backend import SimBackendConfig
from dilaserve.schedule.policies import get_policy
from dilaserve.sim.arrivals import TRACE_LENGTHS, with_lengths
from dilaserve.sim.capacity import nominal_capacity_rps
from dilaserve.sim.lengths import LENGTH_MODELS
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.replay import ReplayTable
from dilaserve.sim.setting import ClusterSetting, Predictors, with_dynamics
from dilaserve.sim.simulator import SimConfig, SimResult, Simulator
from dilaserve.sim.traces import AZURE_CONV, Trace, load_trace

log = logging.getLogger(__name__)

#: The paper's cluster: 16 GPUs = 4 nodes x 4, TP {1, 2, 4}, the analytic LLaDA-8B on H100 profile.
PAPER = ("paper", "llada-8b-h100", (1, 2, 4))
#: The embedded model's measured profile (TP 1 and 2 measured) on the same 16 slots.
EMBEDDED = ("embedded", "measured", (1, 2))
SETTINGS = {"paper": PAPER, "embedded": EMBEDDED}
#: ``EvalOptions.lengths`` choices: the trace's own token counts, or a length model's draws.
LENGTHS = (TRACE_LENGTHS, *LENGTH_MODELS)
#: The trace experiments' low-load phase, a fraction of nominal capacity.
TRACE_LOW_LOAD = 0.3


@dataclass(frozen=True)
class EvalOptions:
    """Attributes:
        quick: a reduced run (short phases, fewer sweep points) that takes minutes.
        settings: which cluster settings to run (``paper``, ``embedded``).
        trace: trace CSV (Azure format or BurstGPT) for the trace and ablation experiments.
        out: results folder (git-ignored).
        seed: seeds arrivals, replayed outcomes and latency noise.
        artifacts: pipeline artifact folder (None: ``$DILASERVE_ARTIFACTS`` or data/artifacts).
        latency_noise: sigma of the multiplicative step-latency noise.
        phase_s: seconds per load phase of the trace and ablation experiments (None: 1 h, or
            75 s when quick); a shorter phase keeps the low/high mix at a fraction of the cost.
        lengths: request lengths of the trace experiments: ``trace`` (the trace's own token
            counts) or a length model (``sharegpt``, ``gsm8k``, ``long-prompt``) whose draws
            (seeded by ``seed``) replace each request's lengths while its arrival time stays.
            Loads are fractions of the nominal capacity for the lengths used.
        high_load: the high-load phase's rate as a fraction of nominal capacity (the low
            phase runs at ``TRACE_LOW_LOAD``); above 1 the cluster is overloaded at the
            baselines' threshold, which only a lower threshold can absorb.
        policies: run these policies instead of each experiment's own list (None: the list).
    """

    quick: bool = False
    settings: tuple[str, ...] = ("paper", "embedded")
    trace: Path = AZURE_CONV
    out: Path = Path("results")
    seed: int = 0
    artifacts: Optional[Path] = None
    latency_noise: float = 0.05
    phase_s: Optional[float] = None
    lengths: str = TRACE_LENGTHS
    high_load: float = 0.8
    policies: Optional[tuple[str, ...]] = None

    def __post_init__(self) -> None:
        if self.phase_s is not None and self.phase_s <= 0:
            raise ValueError(f"--phase-s {self.phase_s} must be positive: seconds per load phase, e.g. 900")
        if self.lengths not in LENGTHS:
            raise ValueError(f"--lengths {self.lengths!r} is unknown: use {TRACE_LENGTHS!r} for the trace's own "
                             f"token counts or a length model ({', '.join(LENGTH_MODELS)})")
        if not self.high_load > 0:
            raise ValueError(f"--high-load {self.high_load} must be a positive fraction of nominal capacity, "
                             "e.g. 0.8 (the default) or 1.2 (overload)")
        for name in self.policies or ():
            get_policy(name)  # an unknown name fails here, listing the registered ones
        bad = [s for s in self.settings if s not in SETTINGS]
        if bad or not self.settings:
            raise ValueError(f"unknown settings {bad or list(self.settings)}: choose from {sorted(SETTINGS)}")


class EvalContext:
    def __init__(self, options: EvalOptions):
        self.options = options

    # ------------------------------------------------------------ artifacts
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
        return Predictors(artifacts.load_predictor(self.options.artifacts), artifacts.load_oneshot(self.options.artifacts),
                          self.quality)

    @cached_property
    def trace(self) -> Trace:
        """The trace file, with its lengths replaced as ``options.lengths`` says."""
        return with_lengths(load_trace(self.options.trace), self.options.lengths, self.options.seed)

    # ------------------------------------------------------------ settings
    def setting(self, name: str) -> ClusterSetting:
        label, profile, tps = SETTINGS[name]
        # Quick runs last minutes, so the monitor's window shrinks with the tick interval.
        monitor = MonitorConfig(window_s=60.0) if self.options.quick else MonitorConfig()
        base = ClusterSetting(label, artifacts.load_profile(profile, self.options.artifacts),
                              ClusterConfig(nodes=4, gpus_per_node=4, tp_degrees=tps), monitor=monitor)
        return with_dynamics(base, self.dynamics)

    @property
    def settings(self) -> list[ClusterSetting]:
        return [self.setting(s) for s in self.options.settings]

    def sim_config(self) -> SimConfig:
        backend = SimBackendConfig(latency_noise=self.options.latency_noise, seed=self.options.seed)
        if self.options.quick:
            # Phases of a quick run last ~a minute: tick often enough for reconfiguration to act.
            return SimConfig(backend=replace(backend, launch_time_s=5.0), reconfig_interval_s=30.0,
                             telemetry_bin_s=10.0)
        return SimConfig(backend=backend)

    def simulator(self, setting: ClusterSetting) -> Simulator:
        progress = ReplayProgress(self.table, self.quality, seed=self.options.seed)
        return Simulator(setting, progress, self.predictors, self.sim_config())

    def capacity(self, setting: ClusterSetting, prompt_tokens, output_tokens) -> float:
        return nominal_capacity_rps(setting, self.table, prompt_tokens, output_tokens,
                                    setting.control.fixed_threshold)

    # ------------------------------------------------------------ running
    def run_policies(self, setting: ClusterSetting, policies: Sequence[str], workload, slo_s: float,
                     label: str = "") -> list[SimResult]:
        """One result per policy. A policy that differs from one already run only by its
        name (``fixed@0.9`` is ``infaas``) reuses that run: runs are deterministic."""
        policies = self.options.policies or policies
        sim = self.simulator(setting)
        out, done = [], {}
        for name in policies:
            t0 = time.perf_counter()
            policy = get_policy(name)
            # Equal up to the name once the threshold override is resolved: the same run.
            same = (replace(policy, name="", fixed_threshold=None), policy.control_for(setting.control))
            if same in done:
                res, how = replace(done[same], policy=policy.name), f"same as {done[same].policy}"
            else:
                res = done[same] = sim.run(policy, workload, slo_s)
                how = f"{time.perf_counter() - t0:.0f}s wall"
            s = res.summary
            print(f"  [{setting.name}{label}] {policy.name:<28} attainment {s.slo_attainment:6.1%}  "
                  f"goodput {s.goodput:6.1%}  mean {s.mean_latency_s:6.2f}s  thr {s.mean_threshold:.3f}  "
                  f"({len(workload)} req, {how})", file=sys.stderr, flush=True)
            out.append(res)
        return out
