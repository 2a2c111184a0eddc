"""Baselines, dilaserve and the oracle end to end on a short stretch of the real trace."""

import dataclasses

import polars as pl
import pytest

from dilaserve.eval.experiments import ABLATION_POLICIES
from dilaserve.predict.replay import ReplayTable
from dilaserve.schedule.control_plane import ControlPlaneSpec, build_control_plane
from dilaserve.schedule.policies import VARIANTS, get_policy
from dilaserve.sim.arrivals import PhaseSpec, shape_trace
from dilaserve.sim.backend import SimBackendConfig
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.simulator import SimConfig, Simulator
from dilaserve.sim.slo import workload_slo
from dilaserve.sim.traces import load_trace
from tests.schedule.fake_backend import RecordingBackend
from tests.sim.builders import THRESHOLDS, predictors, quality, small_setting, trace_case, varied_dynamics

POLICIES = ("infaas", "llumnix", "dilaserve", "dilaserve-paper", "oracle")


@pytest.fixture(scope="module")
def runs():
    table, setting, wl, slo = trace_case([("low", 10, 0.3), ("high", 10, 1.0)])
    cfg = SimConfig(backend=SimBackendConfig(latency_noise=0.05, launch_time_s=1.0), reconfig_tick_s=5.0)
    sim = Simulator(setting, ReplayProgress(table, quality(), seed=0), predictors(table), cfg)
    return wl, slo, {p: sim.run(p, wl, slo) for p in POLICIES}, sim


def test_every_request_is_accounted_for(runs):
    wl, slo, results, _ = runs
    for policy, res in results.items():
        r = res.requests
        assert r.height == len(wl) and r["request_id"].n_unique() == len(wl), policy
        # Served, or refused on arrival by SLO-aware admission (a miss): never lost.
        assert set(r["status"].unique()) <= {"finished", "rejected"}, policy
        if policy not in ("dilaserve", "oracle"):
            assert (r["status"] == "finished").all(), policy
        done = r.filter(pl.col("status") == "finished")
        fin = done["latency_s"]
        assert (fin > 0).all()
        assert done["met_slo"].to_list() == (fin <= slo + 1e-9).to_list()
        assert not r.filter(pl.col("status") == "rejected")["met_slo"].any()
        s = res.summary
        # The summary is the request table's: attainment is the share of all requests in time,
        # the phases' shares weigh into it, and at 30% of capacity no policy misses.
        n_low = (r["phase"] == "low").sum()
        assert s.slo_attainment == pytest.approx(r["met_slo"].sum() / len(wl)), policy
        assert s.slo_attainment == pytest.approx(
            (n_low * s.slo_attainment_low + (len(wl) - n_low) * s.slo_attainment_high) / len(wl)
        ), policy
        assert s.slo_attainment_low == 1.0 and s.slo_attainment_high <= s.slo_attainment_low, policy
        assert s.p99_latency_s >= s.mean_latency_s > 0
        assert res.events > len(wl) and res.sim_s >= wl.requests[-1].arrival


def test_baselines_run_fixed_thresholds_on_a_static_cluster(runs):
    _, _, results, _ = runs
    for policy in ("infaas", "llumnix"):
        res = results[policy]
        assert res.requests["mean_threshold"].to_list() == pytest.approx([0.9] * res.requests.height)
        assert res.reconfig_launches == 0
        assert res.tp_series["tp"].unique().to_list() == [1]
    assert results["infaas"].migrations == 0


def test_dilaserve_picks_thresholds_from_the_candidates_and_beats_baselines_under_load(runs):
    _, _, results, _ = runs
    for policy in ("dilaserve", "dilaserve-paper"):
        thr = results[policy].threshold_series["mean_threshold"]
        assert ((thr >= min(THRESHOLDS) - 1e-9) & (thr <= max(THRESHOLDS) + 1e-9)).all()
    assert results["dilaserve-paper"].summary.mean_threshold < 0.9  # the paper's walk lowered some
    for metric in ("slo_attainment", "goodput"):
        best_baseline = max(getattr(results[p].summary, metric) for p in ("infaas", "llumnix"))
        assert getattr(results["dilaserve"].summary, metric) >= best_baseline, metric
    assert results["oracle"].summary.slo_attainment >= results["dilaserve"].summary.slo_attainment - 0.05


def test_runs_are_deterministic(runs):
    wl, slo, results, sim = runs
    again = sim.run("llumnix", wl, slo)
    assert again.requests.equals(results["llumnix"].requests)


def _pieces(sched) -> dict:
    """What a built scheduler runs, by the policy field that chooses it."""
    c = sched.controller
    return {
        "selection": type(c.selection),
        "load_control": type(c.load_control),
        "admission": type(c.admission),
        "quality_budget": tuple(c.budget_mask),
        "step_pricing": c.step_pricing,
        "calibrate": c.predictions.calibrate,
        "ration": c.ration is not None,
        "reconfig": sched.reconfigurator is not None,
        "predictor": id(c.predictions.predictor),
        "migration_point": type(sched.migration_point),
        "dispatch": type(sched.dispatch),
        "tune": sched.tuner is not None,
        "deadline_batching": sched.policy.deadline_batching,
    }


def test_each_ablation_runs_its_parent_with_exactly_the_piece_it_names_changed():
    """An ablation that silently ran its parent's (or dilaserve's) pieces would report the
    parent's numbers under its own name: build each and compare what it runs."""
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    setting = small_setting(dyn)
    sim = Simulator(setting, ReplayProgress(table, quality()), predictors(table))
    accuracy = {0.5: 0.5, 0.6: 0.6, 0.7: 0.7, 0.8: 0.9, 0.9: 0.95}  # the budget of 0.1 allows 0.8 and 0.9
    spec = ControlPlaneSpec(
        setting.profile,
        setting.control,
        setting.cluster,
        reconfig=setting.reconfig,
        accuracy=accuracy,
        evaluator=lambda arrivals, layout, points: [0.0] * len(points),  # built, never called
    )

    def built(name):
        policy = get_policy(name)
        return _pieces(build_control_plane(RecordingBackend(), policy, spec, sim._predictor(policy, {})))

    for parent, variants in VARIANTS.items():
        base, parent_pieces = get_policy(parent), built(parent)
        for name in variants:
            policy = get_policy(name)
            named = {
                f.name
                for f in dataclasses.fields(policy)
                if f.name != "name" and getattr(policy, f.name) != getattr(base, f.name)
            }
            pieces = built(name)
            changed = {k for k in pieces if pieces[k] != parent_pieces[k]}
            # Rationing rides on admission: without admission there is nothing to ration.
            implied = {"ration"} if "admission" in named and parent_pieces["ration"] else set()
            assert named and changed == named | implied, (
                f"{name}: names {named}, runs {changed} differently from {parent}"
            )
    assert {"quality_budget", "admission"} <= {
        k for k, v in built("dilaserve").items() if v != built("dilaserve-paper")[k]
    }


def test_ablation_policies_run():
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    setting = small_setting(dyn)
    wl = shape_trace(load_trace(), [PhaseSpec("high", 5, 6.0)])
    slo = workload_slo(wl, setting.profile, table, 32, 0.9)
    sim = Simulator(setting, ReplayProgress(table, quality()), predictors(table), SimConfig(reconfig_tick_s=2.0))
    for policy in ABLATION_POLICIES:
        res = sim.run(policy, wl, slo)
        assert res.summary.finished + res.summary.rejected == len(wl), policy
    with pytest.raises(ValueError, match="needs a learned step predictor"):
        Simulator(setting, ReplayProgress(table, quality())).run("dilaserve", wl, slo)
