"""Step-time calibration end to end: on instances 1.5x slower than the profile says,
dilaserve learns the machine from its steps and keeps the promises admission makes; with
the profile trusted as measured it admits what the slow instances cannot finish."""

from dataclasses import replace

import polars as pl
import pytest

from dilaserve.schedule.policies import get_policy
from dilaserve.schedule.tuner import TunerConfig
from dilaserve.sim import window_replay
from dilaserve.sim.backend import SimBackendConfig
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.simulator import SimConfig, Simulator
from tests.sim.builders import predictors, quality, trace_case

LEARNS = get_policy("dilaserve-no-tuner")
TRUSTS = replace(LEARNS, name="dilaserve-no-tuner-no-step-time", learn_step_time=False)


def slo_met_admitted(requests: pl.DataFrame) -> float:
    """The share of the admitted (not refused) requests that met their SLO."""
    admitted = requests.filter(pl.col("status") != "rejected")
    return float(admitted["met_slo"].mean())


@pytest.fixture(scope="module")
def slow_machine():
    table, setting, wl, slo = trace_case([("steady", 30, 0.8)])

    def run(policy, factor: float, tuner: TunerConfig | None = None):
        backend = SimBackendConfig(latency_noise=0.05, launch_time_s=1.0)
        cfg = SimConfig(backend=backend, step_time_factor=factor, tuner=tuner or TunerConfig())
        # A tuner replays on the quality table: only a tuned run is handed one.
        preds = predictors(table) if tuner is None else replace(predictors(table), quality=quality())
        sim = Simulator(setting, ReplayProgress(table, quality(), seed=0), preds, cfg)
        return sim.run(policy, wl, slo)

    return run


def test_on_a_slower_machine_admission_keeps_its_promises_only_once_it_learns_the_step_time(slow_machine):
    learned = slow_machine(LEARNS, 1.5).requests
    trusted = slow_machine(TRUSTS, 1.5).requests
    assert slo_met_admitted(learned) >= 0.9
    assert slo_met_admitted(trusted) < slo_met_admitted(learned) - 0.02
    # it refuses what the slow instances cannot finish, where the profile alone admits it
    assert (learned["status"] == "rejected").sum() > (trusted["status"] == "rejected").sum()


def test_on_the_profiled_machine_learning_changes_nothing(slow_machine):
    learned = slow_machine(LEARNS, 1.0).requests
    trusted = slow_machine(TRUSTS, 1.0).requests
    assert learned["status"].to_list() == trusted["status"].to_list()
    assert learned["met_slo"].to_list() == trusted["met_slo"].to_list()


def test_a_tuned_run_replays_on_the_machine_it_learned(slow_machine, monkeypatch):
    """The tuner's replays step as much slower than the profile as the live control plane
    has learned: about the 1.5x the slow instances take, once the steps have taught it."""
    seen = []
    replay = window_replay.WindowReplay.__call__

    def spy(self, *args, step_factors=(), **kwargs):
        seen.append(dict(step_factors))
        return replay(self, *args, step_factors=step_factors, **kwargs)

    monkeypatch.setattr(window_replay.WindowReplay, "__call__", spy)
    slow_machine(get_policy("dilaserve"), 1.5, TunerConfig(interval_s=5.0, window_s=5.0, sample=1.0, min_arrivals=10))
    learned = [f for f in seen if f]
    assert learned and len(learned) >= len(seen) - 1  # every tuning after the first steps learned
    assert all(1.3 < f < 1.7 for f in learned[-1].values())


def test_the_factor_is_validated_with_a_fix():
    with pytest.raises(ValueError, match="1.5x slower"):
        SimConfig(step_time_factor=0.0)
