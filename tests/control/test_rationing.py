import numpy as np
import pytest

from dilaserve.control import ControlConfig, ThresholdController
from dilaserve.control.rationing import WorkRation
from dilaserve.predict.base import OneShotPredictor
from dilaserve.schedule.policies import policies
from tests.control.builders import default_profile, make_request


def _observe(ration: WorkRation, works, value=1.0, start=0.0):
    for i, w in enumerate(works):
        ration.observe(start + 0.01 * i, w, value)


def test_rationing_refuses_nothing_while_the_arrivals_fit():
    ration = WorkRation(window_s=10.0)
    _observe(ration, [1.0] * 6 + [10.0] * 2)  # 26 token-steps in the window
    assert ration.cutoff(throughput=2.6) == 0.0  # 26 fit exactly
    assert ration.admits(work=100.0, value=1.0, throughput=2.6)


def test_under_overload_rationing_takes_the_most_hits_per_unit_of_work():
    ration = WorkRation(window_s=10.0)
    _observe(ration, [1.0] * 6 + [10.0] * 2)
    # Room for 10 token-steps: the six short arrivals fill 6 of them, a long one does not fit.
    assert ration.cutoff(throughput=1.0) == pytest.approx(1.0 / 10.0)
    assert ration.admits(work=1.0, value=1.0, throughput=1.0)
    # A long arrival still fits once the short ones leave room for it ...
    assert ration.admits(work=10.0, value=1.0, throughput=1.0)
    # ... but not when the window holds more short work than the cluster can do.
    _observe(ration, [1.0] * 10, start=0.1)
    assert not ration.admits(work=10.0, value=1.0, throughput=1.0)
    assert ration.admits(work=1.0, value=1.0, throughput=1.0)
    assert ration.cutoff(throughput=1.0) == pytest.approx(1.0)
    # Expected hits buy work: a request surely correct is worth more work than one that
    # is right one time in ten.
    assert ration.admits(work=1.0, value=1.0, throughput=1.0)
    assert not ration.admits(work=1.0, value=0.1, throughput=1.0)


def test_rationing_never_refuses_identical_requests_for_each_other():
    """Equal density everywhere: rationing has nothing to prefer, so the SLO check decides."""
    ration = WorkRation(window_s=10.0)
    _observe(ration, [4.0] * 50)
    assert ration.cutoff(throughput=1.0) == pytest.approx(0.25)
    assert ration.admits(work=4.0, value=1.0, throughput=1.0)


def test_rationing_forgets_arrivals_older_than_its_window():
    ration = WorkRation(window_s=5.0)
    _observe(ration, [10.0] * 20)
    assert ration.cutoff(throughput=1.0) == pytest.approx(0.1)  # 200 token-steps, room for 10
    ration.observe(100.0, 1.0, 1.0)  # long after: only this arrival is in the window
    assert ration.cutoff(throughput=1.0) == 0.0


def test_rationing_rejects_a_bad_window_or_utilisation():
    with pytest.raises(ValueError, match="positive"):
        WorkRation(window_s=0.0)
    with pytest.raises(ValueError, match="utilisation"):
        WorkRation(window_s=1.0, utilisation=1.5)
    with pytest.raises(ValueError, match="ration_window_s"):
        ControlConfig(ration_window_s=-1.0)
    with pytest.raises(ValueError, match="ration_utilisation"):
        ControlConfig(ration_utilisation=0.0)


def _controller(cfg: ControlConfig) -> ThresholdController:
    steps = {t: 0.5 for t in cfg.thresholds}
    return ThresholdController(cfg, default_profile(), OneShotPredictor(steps), admission="slo")


def test_the_controller_refuses_the_longest_arrivals_once_the_cluster_is_over_capacity():
    cfg = ControlConfig()
    ctl = _controller(cfg)
    assert ctl.ration is not None
    short = [make_request(f"s{i}", gen=32, arrival=0.01 * i, slo=100.0) for i in range(40)]
    long = [make_request(f"l{i}", gen=512, arrival=0.5 + 0.01 * i, slo=100.0) for i in range(40)]
    for r in short + long:
        ctl.prepare_arrival(r, r.arrival)
    assert short[0].ration_work < long[0].ration_work
    # One small instance: far less throughput than the window's arrivals need.
    ctl.control_load(short, [(1, 256)], now=1.0)
    late_short = make_request("s-late", gen=32, arrival=1.0, slo=100.0)
    # Longer than any arrival in the window (identical ones are never refused for each other).
    late_long = make_request("l-late", gen=1024, arrival=1.0, slo=200.0)
    for r in (late_short, late_long):
        ctl.prepare_arrival(r, 1.0)
    placement = lambda r: (1, float(r.tokens), 1)  # noqa: E731
    refusal = ctl.check_admission(late_long, placement(late_long), 1.0)
    assert refusal is not None and "over capacity" in refusal.reason
    assert refusal.retry_after_s == cfg.ration_window_s
    assert ctl.check_admission(late_short, placement(late_short), 1.0) is None


def test_without_rationing_the_long_arrival_is_taken():
    ctl = _controller(ControlConfig(ration_window_s=None))
    assert ctl.ration is None
    reqs = [make_request(f"s{i}", gen=32, arrival=0.01 * i, slo=100.0) for i in range(40)]
    reqs += [make_request(f"l{i}", gen=512, arrival=0.5 + 0.01 * i, slo=100.0) for i in range(40)]
    for r in reqs:
        ctl.prepare_arrival(r, r.arrival)
    ctl.control_load(reqs[:40], [(1, 256)], now=1.0)
    late = make_request("late", gen=512, arrival=1.0, slo=100.0)
    ctl.prepare_arrival(late, 1.0)
    assert ctl.check_admission(late, (1, float(late.tokens), 1), 1.0) is None


def test_a_static_point_with_admission_does_not_ration():
    """Rationing prices work against load control's throughput; a fixed threshold has none."""
    cfg = ControlConfig()
    fixed = ThresholdController(
        cfg, default_profile(), OneShotPredictor({t: 0.5 for t in cfg.thresholds}), selection="fixed", admission="slo"
    )
    assert fixed.admission_on and fixed.ration is None


def test_the_paper_policy_and_the_ablation_do_not_ration():
    assert policies.get("dilaserve").ration
    assert not policies.get("dilaserve-no-rationing").ration
    assert not policies.get("dilaserve-paper+admission").ration, "+admission adds the SLO check alone"
    cfg = ControlConfig()
    off = ThresholdController(
        cfg, default_profile(), OneShotPredictor({t: 0.5 for t in cfg.thresholds}), admission="slo", ration=False
    )
    assert off.admission_on and off.load_control_on and off.ration is None


def _exact_cutoff(arrivals, now, window_s, throughput):
    """The cutoff from scratch: the window's arrivals, best density first, fill the capacity."""
    rows = [(w, v) for t, w, v in arrivals if t > now - window_s]
    capacity = throughput * window_s
    if not rows or sum(w for w, _ in rows) <= capacity:
        return 0.0
    filled = 0.0
    for w, v in sorted(rows, key=lambda r: -r[1] / r[0]):
        filled += w
        if filled > capacity:
            return v / w
    return 0.0


def test_the_cutoff_kept_as_arrivals_come_and_go_is_the_one_computed_from_scratch():
    rng = np.random.default_rng(0)
    ration, seen, now = WorkRation(window_s=5.0), [], 0.0
    for _ in range(3000):
        now += float(rng.exponential(0.05))
        work, value = float(rng.lognormal(3.0, 1.5)), float(rng.uniform(0.1, 1.0))
        ration.observe(now, work, value)
        seen.append((now, work, value))
        # Throughputs around the window's load, so the answer flips between 0 and a price.
        throughput = float(rng.uniform(0.5, 1.5)) * sum(w for t, w, _ in seen if t > now - 5.0) / 5.0
        assert ration.cutoff(throughput) == pytest.approx(_exact_cutoff(seen, now, 5.0, throughput), rel=1e-12)
