"""Deadline batching: a step leaves out the members with slack to spare while that saves a
member that would miss in the whole batch."""

from __future__ import annotations

import pytest

from dilaserve.control import ControlConfig, ThresholdController
from dilaserve.predict.base import OneShotPredictor
from dilaserve.schedule.policies import policies
from tests.control.builders import default_profile, make_request

NOW = 0.0


def _controller() -> ThresholdController:
    cfg = ControlConfig()
    return ThresholdController(cfg, default_profile(), OneShotPredictor({t: 0.5 for t in cfg.thresholds}))


def _instance(ctl: ThresholdController, loose_slo: float):
    """One short request beside four with long prompts (they make every step slow)."""
    tight = make_request("tight", prompt=36, gen=64, slo=100.0)
    loose = [make_request(f"loose{i}", prompt=2000, gen=64, slo=loose_slo) for i in range(4)]
    members = [tight, *loose]
    for r in members:
        ctl.prepare_arrival(r, NOW)
    ctl.select(members, 1, float(sum(r.tokens for r in members)), len(members), NOW)
    return tight, loose, members


def _seconds(ctl, req, members) -> float:
    return ctl._remaining_fn(req, 1, float(sum(r.tokens for r in members)), len(members))(req.threshold_index)


def _set_slo(req, seconds: float) -> None:
    req.deadline = req.arrival + seconds


def test_members_with_slack_sit_out_while_that_saves_a_member_about_to_miss():
    ctl = _controller()
    tight, loose, members = _instance(ctl, loose_slo=1e4)
    alone, full = _seconds(ctl, tight, [tight]), _seconds(ctl, tight, members)
    assert alone < full  # the long prompts slow its steps
    _set_slo(tight, (alone + full) / 2)  # misses in the whole batch, makes it alone
    assert ctl.step_members(members, 1, NOW) == [tight]


def test_everyone_steps_when_nobody_would_miss_or_nobody_has_slack_to_spare():
    ctl = _controller()
    tight, loose, members = _instance(ctl, loose_slo=1e4)
    assert ctl.step_members(members, 1, NOW) == members  # nobody misses
    alone, full = _seconds(ctl, tight, [tight]), _seconds(ctl, tight, members)
    _set_slo(tight, (alone + full) / 2)
    for r in loose:  # each would keep less than half its time free: none waits
        _set_slo(r, 1.5 * _seconds(ctl, r, members))
    assert ctl.step_members(members, 1, NOW) == members


def test_nobody_waits_for_a_member_that_misses_even_in_the_smaller_batch():
    ctl = _controller()
    tight, loose, members = _instance(ctl, loose_slo=1e4)
    _set_slo(tight, 0.5 * _seconds(ctl, tight, [tight]))
    assert ctl.step_members(members, 1, NOW) == members


def test_only_the_default_policy_batches_by_deadline():
    assert policies.get("dilaserve").deadline_batching
    assert not policies.get("dilaserve-no-deadline-batching").deadline_batching
    assert not policies.get("dilaserve-paper").deadline_batching
    assert not policies.get("fixed@0.7+admission").deadline_batching


def test_deadline_spare_must_leave_a_share_free():
    with pytest.raises(ValueError, match="deadline_spare"):
        ControlConfig(deadline_spare=1.0)
