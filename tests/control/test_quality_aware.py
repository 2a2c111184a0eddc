"""The quality-aware threshold-policy pieces, each against the paper's counterpart."""

import numpy as np
import pytest

from dilaserve.cluster.base import InstanceReady, InstanceSpec
from dilaserve.control import ControlConfig, ThresholdController, cap_thresholds
from dilaserve.control.batch_cost import mixed_step_prices
from dilaserve.control.policies import admission_policies, load_controls, selection_policies
from dilaserve.control.quality_budget import quality_allowed
from dilaserve.engine.state import StepKind
from dilaserve.predict.base import OneShotPredictor
from dilaserve.schedule import RequestArrived
from tests.builders.schedule import build_scheduler
from tests.control.builders import TablePredictor, commit, default_profile, flat_profile, make_request
from tests.schedule.fake_backend import RecordingBackend

ACCURACY = {0.5: 0.15, 0.6: 0.58, 0.7: 0.72, 0.8: 0.84, 0.9: 0.92}
CFG = ControlConfig()


# --------------------------------------------------------------- selection
@pytest.mark.parametrize("name, hopeless", [("paper", 0), ("keep_quality", 4)])
def test_a_request_that_fits_nowhere_is_degraded_only_by_the_paper(name, hopeless):
    sel = selection_policies.get(name)(CFG)
    allowed = [True] * 5
    remaining = [1.0, 2.0, 3.0, 4.0, 5.0].__getitem__  # seconds at 0.5 .. 0.9
    assert sel.choose(allowed, 4, remaining, 10.0) == 4  # fits at its cap: no drop
    assert sel.choose(allowed, 4, remaining, 2.5) == 1  # the highest that fits, both walks
    assert sel.choose(allowed, 4, remaining, 0.5) == hopeless


def test_fixed_selection_ignores_predictions():
    sel = selection_policies.get("fixed")(ControlConfig(fixed_threshold=0.7))
    assert sel.choose([True] * 5, 4, None, 0.0) == 2
    assert sel.choose([False, False, False, True, True], 4, None, 0.0) == 4  # floor above 0.7: its cap


# ------------------------------------------------------------ load control
def test_feasible_prefix_caps_only_requests_that_can_still_fit():
    load = np.tile([1.0, 2.0, 4.0], (4, 1))
    allowed = np.ones((4, 3), dtype=bool)
    # Even at the lowest threshold only three requests fit a capacity of 3.5.
    paper = load_controls.get("paper")(CFG).caps(load, allowed, 3.5)
    prefix = load_controls.get("feasible_prefix")(CFG).caps(load, allowed, 3.5)
    np.testing.assert_array_equal(paper, [0, 0, 0, 0])  # all degraded, one misses anyway
    np.testing.assert_array_equal(prefix[:3], cap_thresholds(load[:3], allowed[:3], 3.5))
    assert prefix[3] == 2  # the one over capacity keeps 0.9
    # When everything fits at the lowest, the two walks agree.
    np.testing.assert_array_equal(
        load_controls.get("feasible_prefix")(CFG).caps(load, allowed, 7.0), cap_thresholds(load, allowed, 7.0)
    )
    np.testing.assert_array_equal(load_controls.get("none")(CFG).caps(load, allowed, 0.0), [2, 2, 2, 2])


# ----------------------------------------------------------- quality budget
@pytest.mark.parametrize(
    "budget, allowed",
    [
        (0.1, [0.8, 0.9]),
        (0.25, [0.7, 0.8, 0.9]),
        (0.0, [0.9]),
        (None, [0.5, 0.6, 0.7, 0.8, 0.9]),
    ],
)
def test_quality_budget_allows_thresholds_from_the_measured_table(budget, allowed):
    thr = CFG.thresholds
    mask = quality_allowed(thr, ACCURACY, budget)
    assert [t for t, m in zip(thr, mask) if m] == allowed


def test_quality_budget_follows_the_model_not_a_list():
    # A model whose accuracy barely moves allows every threshold under the same budget.
    flat = {0.5: 0.86, 0.6: 0.88, 0.7: 0.90, 0.8: 0.91, 0.9: 0.92}
    assert quality_allowed(CFG.thresholds, flat, 0.1).all()
    with pytest.raises(ValueError, match="no accuracy for thresholds"):
        quality_allowed(CFG.thresholds, {0.9: 0.9}, 0.1)


def test_controller_applies_budget_and_client_floor():
    ctl = ThresholdController(CFG, flat_profile(), TablePredictor([1] * 5), accuracy=ACCURACY)
    r = make_request("r")
    ctl.prepare_arrival(r, 0.0)
    assert r.allowed.tolist() == [False, False, False, True, True]
    strict = make_request("s", min_threshold=0.9)
    ctl.prepare_arrival(strict, 0.0)
    assert strict.allowed.tolist() == [False, False, False, False, True]
    paper = ThresholdController(
        CFG, flat_profile(), TablePredictor([1] * 5), accuracy=ACCURACY, apply_quality_budget=False
    )
    paper.prepare_arrival(r, 0.0)
    assert r.allowed.all()


def test_quality_budget_without_a_table_allows_everything_and_says_so(caplog):
    ctl = ThresholdController(CFG, flat_profile(), TablePredictor([1] * 5), accuracy=None)
    assert ctl.budget_mask.all() and "no threshold-quality table" in caplog.text


# ---------------------------------------------------------------- admission
def test_slo_admission_refuses_predicted_misses_with_a_retry_hint():
    adm = admission_policies.get("slo")(CFG)
    assert adm.check(0.9, 1.0) is None
    assert adm.check(None, 1.0) is None  # would wait for room: not predicted, admitted
    no = adm.check(3.4, 1.0)
    assert no is not None and "predicted 3.40 s" in no.reason and no.retry_after_s == 3.0
    # Harming one request in flight is a wash (one hit for one miss); two is a net loss.
    assert adm.check(0.9, 1.0, harmed=1) is None
    assert "2 request(s) in flight" in adm.check(0.9, 1.0, harmed=2).reason
    assert admission_policies.get("all")(CFG).check(100.0, 0.0) is None


def _scheduler(policy, predictor):
    sched = build_scheduler(RecordingBackend(), policy, predictor)
    sched.start([InstanceSpec("a", 1, 0, (0,), 100_000)])
    sched.handle(InstanceReady(0.0, "a"))
    return sched


def test_scheduler_refuses_an_arrival_that_cannot_make_its_slo_and_keeps_the_rest():
    sched = _scheduler("dilaserve-no-reconfig", OneShotPredictor({t: 0.7 for t in CFG.thresholds}))
    ok = make_request("ok", slo=100.0)
    sched.handle(RequestArrived(0.0, ok))
    doomed = make_request("doomed", gen=512, slo=0.001)
    sched.handle(RequestArrived(0.0, doomed))
    out = {o.request_id: o for o in sched.outcomes}
    assert "ok" not in out and ok.instance == "a"
    assert out["doomed"].status == "rejected" and out["doomed"].retry_after_s >= 1
    assert "doomed" not in sched.requests
    # Without admission the same request is taken (and will miss).
    paper = _scheduler("dilaserve-paper-no-reconfig", OneShotPredictor({t: 0.7 for t in CFG.thresholds}))
    paper.handle(RequestArrived(0.0, make_request("doomed", gen=512, slo=0.001)))
    assert not paper.outcomes and "doomed" in paper.requests


def test_an_operating_point_without_admission_takes_what_admission_would_refuse():
    from dilaserve.control.operating_point import OperatingPoint

    sched = _scheduler("dilaserve-no-reconfig", OneShotPredictor({t: 0.7 for t in CFG.thresholds}))
    point = OperatingPoint.static(0.9).with_admit(False)
    assert point.label == "static@0.9+take-all" and point.with_pin(0, 0.8).admit is False
    sched.controller.set_point(point)
    for i in range(3):
        sched.handle(RequestArrived(0.0, make_request(f"long-{i}", gen=512, slo=20.0)))
    # as long as each of the others: its time alone is theirs on arrival
    alone = sched.controller.fastest_alone_s(sched.requests["long-0"], [1])[0]
    sched.handle(RequestArrived(0.0, make_request("crowded", gen=512, slo=alone * 1.2)))
    assert not sched.outcomes and "crowded" in sched.requests  # late behind the others, but taken
    sched.handle(RequestArrived(0.0, make_request("doomed", gen=512, slo=0.001)))
    assert [o.request_id for o in sched.outcomes] == ["doomed"]  # it misses even alone: refused
    sched.controller.set_point(point.with_admit(True))
    sched.handle(RequestArrived(0.0, make_request("crowded-2", gen=512, slo=alone * 1.2)))
    assert [o.status for o in sched.outcomes] == ["rejected", "rejected"]


# --------------------------------------------------------------- calibration
def test_calibration_corrects_a_predictor_that_is_off_by_a_factor():
    # The predictor says 4 steps; every request really takes 8 (4 tokens a step over 32).
    ctl = ThresholdController(
        ControlConfig(thresholds=(0.9,), quality_budget=None), flat_profile(), TablePredictor([4.0])
    )
    for i in range(300):
        r = make_request(f"r{i}", gen=32)
        ctl.prepare_arrival(r, 0.0)
        for _ in range(8):
            commit(r, 4)
        ctl.on_finish(r)
    assert ctl.predictions.scale == pytest.approx(2.0, rel=0.02)
    fresh = make_request("new", gen=32)
    ctl.prepare_arrival(fresh, 0.0)
    assert fresh.steps_pred[0] == pytest.approx(8.0, rel=0.02)
    off = ThresholdController(
        ControlConfig(thresholds=(0.9,), quality_budget=None), flat_profile(), TablePredictor([4.0]), calibrate=False
    )
    off.prepare_arrival(fresh, 0.0)
    assert off.predictions.scale == 1.0


# ------------------------------------------------------------ mixed batches
def test_mixed_step_prices_alone_are_the_request_own_passes():
    p = default_profile()
    alone = mixed_step_prices(p, 1, 1, 400, 400, 32, 0.125)
    assert alone.cache == pytest.approx(p.latency(1, 32, StepKind.CACHE))
    assert alone.recompute == pytest.approx(p.latency(1, 400, StepKind.RECOMPUTE))


def test_mixed_step_prices_charge_the_pass_batch_mates_trigger():
    p = default_profile()
    busy = mixed_step_prices(p, 1, 40, 40 * 400, 400, 32, 0.125)
    paper_cache = p.latency(1, 32 * 40, StepKind.CACHE)
    # Nearly every step of a 40-request batch carries a recompute pass over ~5 canvases.
    assert busy.cache > paper_cache + 0.9 * p.latency(1, 5 * 400, StepKind.RECOMPUTE) - 1e-12
    assert mixed_step_prices(p, 1, 80, 80 * 400, 400, 32, 0.125).cache > busy.cache
    never = mixed_step_prices(p, 1, 40, 40 * 400, 400, 32, 0.0)  # nobody else recomputes
    assert never.cache == pytest.approx(p.latency(1, 32 * 40, StepKind.CACHE))


def test_admission_refuses_a_newcomer_that_would_push_two_requests_in_flight_past_their_slo():
    cfg = ControlConfig(quality_budget=None)
    ctl = ThresholdController(
        cfg, default_profile(), OneShotPredictor({t: 0.7 for t in cfg.thresholds}), admission="slo"
    )
    probe, big = make_request("probe"), make_request("big", prompt=3000, slo=1e6)
    ctl.prepare_arrival(probe, 0.0)
    ctl.prepare_arrival(big, 0.0)
    n, tokens = 3, 3 * probe.tokens
    before = ctl._remaining_fn(probe, 1, tokens, n)(0)
    after = ctl._remaining_fn(probe, 1, tokens + big.tokens, n + 1)(0)
    assert after > before
    # Members that keep their 10% headroom now, and lose it once the newcomer joins.
    slo = (before + after) / 2 / (1 - cfg.admission_headroom)
    tight = [make_request(f"m{i}", slo=slo) for i in range(2)]
    loose = make_request("loose", slo=1e6)
    for m in (*tight, loose):
        ctl.prepare_arrival(m, 0.0)
    placement = (1, float(tokens + big.tokens), n + 1)
    refusal = ctl.check_admission(big, placement, 0.0, [*tight, loose])
    assert refusal is not None and "2 request(s) in flight" in refusal.reason
    # One harmed request is a wash: the newcomer is taken.
    assert ctl.check_admission(big, placement, 0.0, [tight[0], loose, loose]) is None
