"""Tiny trace experiments, shared by the eval tests and the notebook inputs."""

from __future__ import annotations

from dilaserve.eval.context import EvalContext, EvalOptions
from dilaserve.eval.experiments import ExperimentOutput, Run
from dilaserve.predict.replay import ReplayTable
from dilaserve.sim.arrivals import PhaseSpec, shape_trace
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.setting import ClusterSetting
from dilaserve.sim.simulator import SimConfig, Simulator
from dilaserve.sim.traces import load_trace
from tests.sim.builders import predictors, quality, small_setting, varied_dynamics


def tiny_trace_runs(policies) -> tuple[ExperimentOutput, object]:
    """A 10-second two-phase trace run by ``policies`` on a one-node cluster; returns the
    runs and the step dynamics they replayed."""
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    setting = small_setting(dyn)
    wl = shape_trace(load_trace(), [PhaseSpec("low", 5, 2.0), PhaseSpec("high", 5, 8.0)])
    sim = Simulator(setting, ReplayProgress(table, quality()), predictors(table), SimConfig(reconfig_tick_s=2.0))
    out = ExperimentOutput("trace", notes=["tiny"])
    for policy in policies:
        out.runs.append(
            Run("trace", setting.name, sim.run(policy, wl, 2.0), "trace", wl.mean_rate, 5.0, phases=wl.phases)
        )
    return out, dyn


class TinyContext(EvalContext):
    """An eval context whose every setting is the one-node ``small`` cluster, with the
    hand-made dynamics, quality table and predictors injected (no artifacts loaded), so
    an experiment function runs end to end in seconds."""

    def __init__(self, options: EvalOptions):
        super().__init__(options)
        dyn = varied_dynamics()
        self.__dict__.update(dynamics=dyn, quality=quality(), predictors=predictors(ReplayTable(dyn)))

    def setting(self, name: str) -> ClusterSetting:
        return small_setting(self.dynamics)

    def sim_config(self) -> SimConfig:
        # One reconfiguration tick per short run: each solves an ILP, the bulk of the cost.
        return SimConfig(reconfig_tick_s=5.0)
