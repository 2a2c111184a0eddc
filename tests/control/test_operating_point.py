"""Operating points: pinned tiers admit and run at their threshold, adaptive ones walk."""

from __future__ import annotations

import pytest

from dilaserve.control.config import ControlConfig
from dilaserve.control.controller import ThresholdController
from dilaserve.control.operating_point import OperatingPoint
from dilaserve.predict.base import OneShotPredictor
from tests.control.builders import default_profile, make_request

CFG = ControlConfig(quality_budget=None)


def _controller(point: OperatingPoint, **kw) -> ThresholdController:
    cfg = ControlConfig(quality_budget=None, operating_point=point)
    spt = {t: t / 2 for t in cfg.thresholds}  # fewer steps per token at lower thresholds
    return ThresholdController(cfg, default_profile(), OneShotPredictor(spt), **kw)


def test_pins_by_priority_with_an_adaptive_default():
    point = OperatingPoint.per_tier({2: 0.7, 0: 0.9})
    assert point.pin(2) == 0.7 and point.pin(0) == 0.9 and point.pin(1) is None
    assert not point.is_adaptive and OperatingPoint.adaptive().is_adaptive
    assert point.with_pin(1, 0.8).pin(1) == 0.8 and point.with_pin(2, None).pin(2) is None
    assert OperatingPoint.static(0.8).label == "static@0.8"
    assert point.label == "tiers(2:0.7,0:0.9)"


def test_a_pin_outside_the_candidates_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="pin each tier to one of the candidate thresholds"):
        ControlConfig(operating_point=OperatingPoint.static(0.75))
    with pytest.raises(ValueError, match="priority twice"):
        OperatingPoint(((1, 0.7), (1, 0.9)))


def test_a_pinned_tier_runs_at_its_pin_and_an_adaptive_one_keeps_every_candidate():
    ctl = _controller(OperatingPoint.per_tier({1: 0.6}))
    pinned, free = make_request("a", priority=1), make_request("b", priority=0)
    for r in (pinned, free):
        ctl.prepare_arrival(r, 0.0)
    assert ctl.threshold(pinned) == 0.6 and pinned.allowed.sum() == 1
    assert free.allowed.all() and ctl.threshold(free) == 0.9  # starts at its cap
    ctl.select([pinned], 1, pinned.tokens, 1, 0.0)
    assert ctl.threshold(pinned) == 0.6  # nothing else to pick


def test_a_pin_below_the_clients_floor_gives_way_to_the_floor():
    ctl = _controller(OperatingPoint.static(0.5))
    req = make_request("a", min_threshold=0.75)
    ctl.prepare_arrival(req, 0.0)
    assert ctl.threshold(req) == 0.8


def test_set_point_applies_to_new_arrivals_only():
    ctl = _controller(OperatingPoint.adaptive())
    old = make_request("old")
    ctl.prepare_arrival(old, 0.0)
    ctl.set_point(OperatingPoint.static(0.7))
    new = make_request("new")
    ctl.prepare_arrival(new, 0.0)
    assert old.allowed.all() and ctl.threshold(new) == 0.7


def test_fixed_threshold_admission_predicts_at_the_fixed_threshold_not_the_lowest():
    """A request that fits at 0.5 but not at the fixed 0.9 is refused: it would run at 0.9."""
    cfg = ControlConfig(quality_budget=None, fixed_threshold=0.9)
    spt = {t: t for t in cfg.thresholds}  # 0.9 takes 1.8x the steps of 0.5
    ctl = ThresholdController(cfg, default_profile(), OneShotPredictor(spt), selection="fixed", admission="slo")
    assert ctl.admission_on and not ctl.slo_aware
    probe = make_request("probe", gen=128)
    ctl.prepare_arrival(probe, 0.0)
    at = {t: ctl._remaining_fn(probe, 1, probe.tokens, 1)(cfg.index_of(t)) for t in (0.5, 0.9)}
    assert at[0.5] < at[0.9]
    req = make_request("r", gen=128, slo=(at[0.5] + at[0.9]) / 2)
    ctl.prepare_arrival(req, 0.0)
    assert ctl.threshold(req) == 0.9 and req.cap_index == req.threshold_index  # priced where it runs
    refusal = ctl.check_admission(req, (1, float(req.tokens), 1), 0.0)
    assert refusal is not None and "SLO" in refusal.reason
    roomy = make_request("roomy", gen=128, slo=2 * at[0.9])
    ctl.prepare_arrival(roomy, 0.0)
    assert ctl.check_admission(roomy, (1, float(roomy.tokens), 1), 0.0) is None


def test_admission_needs_a_predictor_even_with_fixed_thresholds():
    with pytest.raises(ValueError, match="admission 'slo' needs a StepPredictor"):
        ThresholdController(CFG, default_profile(), None, selection="fixed", admission="slo")
    ThresholdController(CFG, default_profile(), None, selection="fixed", admission="all")


def test_placement_by_slack_is_part_of_the_point_and_survives_a_tier_move():
    point = OperatingPoint.static(0.8).with_fit(True)
    assert point.fit and point.label == "static@0.8+fit"
    moved = point.with_pin(1, 0.7)
    assert moved.fit and moved.pin(1) == 0.7 and moved.pin(0) == 0.8
    assert point.with_fit(False) == OperatingPoint.static(0.8) and point != OperatingPoint.static(0.8)


@pytest.mark.parametrize(
    "point",
    [
        OperatingPoint.adaptive(),
        OperatingPoint.static(0.8).with_fit(True),
        OperatingPoint.per_tier({2: 0.7, 1: None}),
        OperatingPoint(((2, 0.8), (0, 0.8)), default=0.7, admit=False),
    ],
)
def test_a_point_is_parsed_back_from_its_label(point):
    assert OperatingPoint.from_label(point.label) == point


def test_a_malformed_label_says_how_to_write_one():
    for text, match in [
        ("tiers(2:x,*:0.7)", "not a threshold"),
        ("tiers(a:0.7)", "not PRIORITY:TAU"),
        ("static@0.7+fast", "unknown suffix"),
        ("fixed@0.7", "write adaptive, static@TAU"),
    ]:
        with pytest.raises(ValueError, match=match):
            OperatingPoint.from_label(text)
