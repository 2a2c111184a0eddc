"""SLO-aware admission of a request that finds no room: it waits behind the queue, and the
wait is part of what it is promised."""

from __future__ import annotations

import pytest

from dilaserve.control.config import ControlConfig
from dilaserve.control.controller import ThresholdController
from dilaserve.control.policies.admission import QueueAhead, WaitingRoom, queued_finish_s
from dilaserve.control.predictions import PredictionCache
from dilaserve.predict.base import OneShotPredictor
from tests.control.builders import default_profile, make_request


def test_a_waiting_request_takes_the_first_place_that_frees_after_those_ahead():
    rooms = [WaitingRoom(0.1, (10.0, 30.0)), WaitingRoom(0.2, (20.0,))]
    # places free at 1.0 s (room 0), 3.0 s (room 0) and 4.0 s (room 1)
    assert queued_finish_s(rooms, [], 5.0) == pytest.approx((1.5, 1.0))
    # the one ahead takes the 1.0 s place and holds it until 2.0 s; the newcomer gets that one
    assert queued_finish_s(rooms, [10.0], 5.0) == pytest.approx((2.5, 2.0))
    # three ahead: 1.0 -> 2.0 -> 3.0 (room 0's first place), 3.0 -> 4.0 (its second); next free: 4.0
    finish, wait = queued_finish_s(rooms, [10.0, 10.0, 10.0], 5.0)
    assert wait == pytest.approx(3.0)
    assert finish == pytest.approx(3.5)


def test_more_requests_ahead_never_shorten_the_wait():
    rooms = [WaitingRoom(0.05, (3.0, 8.0, 12.0)), WaitingRoom(0.08, (5.0,))]
    waits = [queued_finish_s(rooms, [6.0] * k, 4.0)[1] for k in range(12)]
    assert all(b >= a for a, b in zip(waits, waits[1:]))
    assert waits[-1] > waits[0]


def test_an_empty_room_is_free_now_and_no_room_means_no_prediction():
    assert queued_finish_s([WaitingRoom(0.1, ())], [], 5.0) == pytest.approx((0.5, 0.0))
    assert queued_finish_s([], [1.0], 5.0) is None


def _controller() -> ThresholdController:
    cfg = ControlConfig(quality_budget=None)
    # a higher threshold commits fewer tokens a step: more steps
    spt = {t: 0.3 + 0.5 * t for t in cfg.thresholds}
    return ThresholdController(cfg, default_profile(), OneShotPredictor(spt), admission="slo")


def test_admission_refuses_an_arrival_whose_wait_behind_the_queue_misses_its_slo():
    ctl = _controller()
    members = [make_request(f"m{i}", slo=1e6) for i in range(4)]
    ahead = [make_request(f"a{i}", slo=1e6) for i in range(12)]
    for r in (*members, *ahead):
        ctl.prepare_arrival(r, 0.0)
    room = ((1, float(sum(m.tokens for m in members)), len(members)), tuple(members))
    probe = make_request("probe", slo=1e6)
    ctl.prepare_arrival(probe, 0.0)
    alone_behind_members = ctl.queued_finish_s(probe, QueueAhead((room,), ()))
    behind_all = ctl.queued_finish_s(probe, QueueAhead((room,), tuple(ahead)))
    assert behind_all[1] > alone_behind_members[1] > 0
    # its own run is the same either way: only the wait grows
    assert behind_all[0] - behind_all[1] == pytest.approx(alone_behind_members[0] - alone_behind_members[1])
    # an SLO between the two: taken with the short queue, refused (saying it waits) with the long one
    slo = (alone_behind_members[0] + behind_all[0]) / 2
    req = make_request("req", slo=slo)
    ctl.prepare_arrival(req, 0.0)
    assert ctl.check_admission(req, None, 0.0, queue=QueueAhead((room,), ())) is None
    refusal = ctl.check_admission(req, None, 0.0, queue=QueueAhead((room,), tuple(ahead)))
    assert refusal is not None and "waiting for room behind the queue" in refusal.reason
    assert refusal.retry_after_s >= 1
    # without a queue to price (no instance it can wait for) it is taken, as before
    assert ctl.check_admission(req, None, 0.0) is None


def test_the_wait_is_priced_at_the_lowest_allowed_threshold_of_those_ahead():
    ctl = _controller()
    members = [make_request(f"m{i}", slo=1e6) for i in range(2)]
    floor = [make_request(f"f{i}", slo=1e6, min_threshold=max(ctl.config.thresholds)) for i in range(6)]
    free = [make_request(f"g{i}", slo=1e6) for i in range(6)]
    for r in (*members, *floor, *free):
        ctl.prepare_arrival(r, 0.0)
    room = ((1, float(sum(m.tokens for m in members)), len(members)), tuple(members))
    probe = make_request("probe", slo=1e6)
    ctl.prepare_arrival(probe, 0.0)
    lo = PredictionCache.steps_left_at(free[0], ctl.promise_index(free[0]))
    hi = PredictionCache.steps_left_at(floor[0], ctl.promise_index(floor[0]))
    assert hi > lo  # a quality floor takes more steps
    wait_free = ctl.queued_finish_s(probe, QueueAhead((room,), tuple(free)))[1]
    wait_floor = ctl.queued_finish_s(probe, QueueAhead((room,), tuple(floor)))[1]
    assert wait_floor > wait_free
