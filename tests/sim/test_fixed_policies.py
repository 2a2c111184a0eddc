"""fixed@TAU: the INFaaS-like baseline at each candidate threshold."""

from dataclasses import replace

import pytest

from dilaserve.control.config import ControlConfig
from dilaserve.predict.replay import ReplayTable
from dilaserve.schedule.policies import FIXED_POLICIES, get_policy, policies
from dilaserve.sim.arrivals import poisson_workload
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.simulator import SimConfig, Simulator
from tests.sim.builders import predictors, quality, small_setting, varied_dynamics


@pytest.fixture(scope="module")
def sim():
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    return Simulator(
        small_setting(dyn), ReplayProgress(table, quality()), predictors(table), SimConfig(reconfig_tick_s=2.0)
    )


def test_one_fixed_policy_per_candidate_threshold_named_by_it():
    thresholds = ControlConfig().thresholds
    assert (
        FIXED_POLICIES
        == tuple(f"fixed@{t}" for t in thresholds)
        == ("fixed@0.5", "fixed@0.6", "fixed@0.7", "fixed@0.8", "fixed@0.9")
    )
    infaas = get_policy("infaas")
    for name, t in zip(FIXED_POLICIES, thresholds):
        p = policies.get(name)
        # INFaaS-like in every other respect: only the name and the threshold differ.
        assert replace(p, name="infaas", fixed_threshold=None) == infaas and p.fixed_threshold == t
    assert infaas.fixed_threshold is None and get_policy("llumnix").fixed_threshold is None


@pytest.mark.parametrize("name,tau", [("fixed@0.5", 0.5), ("fixed@0.7", 0.7), ("infaas", 0.9), ("llumnix", 0.9)])
def test_every_request_runs_at_the_policys_threshold(sim, name, tau):
    wl = poisson_workload(6.0, 4.0, "sharegpt", seed=3)
    res = sim.run(name, wl, 5.0)
    fin = res.requests.filter(res.requests["status"] == "finished")
    assert fin.height == len(wl)
    assert fin["mean_threshold"].to_list() == pytest.approx([tau] * fin.height)
    if name != "llumnix":  # INFaaS-like: requests stay where they were dispatched
        assert res.migrations == 0


def test_a_threshold_that_is_not_a_candidate_is_refused_with_the_choices(sim):
    odd = replace(get_policy("fixed@0.7"), name="fixed@0.75", fixed_threshold=0.75)
    with pytest.raises(ValueError, match=r"fixed@0\.75.*not a candidate threshold.*fixed@0\.5, fixed@0\.6"):
        sim.run(odd, poisson_workload(2.0, 1.0, "gsm8k"), 5.0)
