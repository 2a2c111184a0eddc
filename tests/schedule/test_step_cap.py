"""The step-time cap (``ControlConfig.max_step_ms``): a batch does not grow past the tokens
whose calibrated step exceeds it; a request that finds every batch at its cap waits, and an
empty instance takes any request its batch holds."""

from dilaserve.control.config import ControlConfig
from dilaserve.engine.state import StepKind
from dilaserve.schedule.placement import tokens_within
from tests.builders.schedule import arrive, cluster, spec
from tests.control.builders import make_request

# default_profile: LP1(n) = .01 + 1e-4 n; a request of make_request's defaults holds 100 tokens.


def _capped(ms: float | None):
    return cluster(specs=[spec("a", 1, max_batch=1000)], control=ControlConfig(max_step_ms=ms))


def test_a_batch_stops_growing_at_the_cap_and_the_next_request_waits():
    sched, _ = _capped(30.0)  # .01 + 1e-4 n <= .03: 200 tokens, two requests
    placed = [arrive(sched, make_request(f"r{i}")) for i in range(3)]
    assert [r.instance for r in placed] == ["a", "a", None]
    assert sched.deferred == [placed[2]]
    free, _ = _capped(None)
    assert [arrive(free, make_request(f"r{i}")).instance for i in range(3)] == ["a", "a", "a"]


def test_an_empty_instance_takes_a_request_larger_than_the_cap():
    sched, _ = _capped(30.0)
    big = arrive(sched, make_request("big", prompt=336))  # 400 tokens: a step of 50 ms alone
    assert big.instance == "a"
    assert arrive(sched, make_request("next")).instance is None


def test_the_cap_follows_the_calibrated_step_time():
    sched, _ = _capped(30.0)
    cal = sched.step_time
    for _ in range(8):  # the machine steps twice as slowly as profiled
        expected = cal.expected(1, 200, 0.0)
        sched._learn_step_time("a", 1, expected, 2.0 * sum(expected))
    assert cal.factor(1, StepKind.RECOMPUTE) > 1.9
    # 2 x (.01 + 1e-4 n) <= .03: 50 tokens, so one request per batch
    assert [arrive(sched, make_request(f"r{i}")).instance for i in range(2)] == ["a", None]


def test_load_control_sees_the_capped_batch():
    sched, _ = _capped(30.0)
    seen = []
    sched.controller.control_load = lambda reqs, instances, now: seen.append(list(instances))
    arrive(sched, make_request("r0"))
    assert seen and seen[-1] == [(1, 200)]


def test_tokens_within_inverts_the_curve():
    sched, _ = _capped(None)
    curve = sched.controller.profile.curve(1, StepKind.RECOMPUTE)
    for seconds in (0.011, 0.03, 0.0755):
        n = tokens_within(curve, seconds, 10_000)
        assert curve(n) <= seconds < curve(n + 1)
    assert tokens_within(curve, 1.0, 300) == 300
    assert tokens_within(curve, 0.001, 300) == 0


def test_a_batch_whose_last_step_took_longer_than_the_cap_stops_growing():
    sched, be = _capped(30.0)
    arrive(sched, make_request("r0"))
    # the instance's step took 50 ms (before any factor is learned): r1 waits
    sched._learn_step_time("a", 1, sched.step_time.expected(1, 100, 0.0), 0.05)
    assert arrive(sched, make_request("r1")).instance is None
    # a step within the cap lets the batch grow again
    sched._learn_step_time("a", 1, sched.step_time.expected(1, 100, 0.0), 0.02)
    assert arrive(sched, make_request("r2")).instance == "a"


def _slower(sched, factor: float) -> None:
    for _ in range(8):  # recompute and cache steps alike
        expected = sched.step_time.expected(1, 200, 64.0)
        sched._learn_step_time("a", 1, expected, factor * sum(expected))


def test_a_waiting_request_the_measured_steps_show_will_miss_is_refused_before_it_runs():
    outcomes = {}
    for recheck in (False, True):
        sched, _ = cluster(
            specs=[spec("a", 1, max_batch=1000)], control=ControlConfig(max_step_ms=30.0, recheck_queue=recheck)
        )
        waiting = [arrive(sched, make_request(f"r{i}")) for i in range(3)][2]
        assert waiting.instance is None and sched.deferred == [waiting]  # admitted, waiting for room
        _slower(sched, 50.0)
        arrive(sched, make_request("late"), t=1.0)  # the next event
        outcomes[recheck] = {o.request_id: o for o in sched.outcomes}
        assert ("r2" in sched.requests) is not recheck
    assert "r2" not in outcomes[False]
    refused = outcomes[True]["r2"]
    assert refused.status == "rejected" and "refused while waiting" in refused.reason
    assert refused.retry_after_s >= 1


def test_a_batch_grows_by_at_most_twice_its_last_measured_step():
    sched, _ = _capped(1000.0)  # a cap far above every step here
    # its last step: one request of 100 tokens, 20 ms on the profile and on the clock
    sched._learn_step_time("a", 1, sched.step_time.expected(1, 100, 0.0), 0.02)
    # .01 + 1e-4 n <= 2 x .02: 300 tokens, three requests, before a step of them is measured
    assert [arrive(sched, make_request(f"r{i}")).instance for i in range(4)] == ["a", "a", "a", None]
    sched._learn_step_time("a", 1, sched.step_time.expected(1, 300, 0.0), 0.04)
    assert arrive(sched, make_request("r4")).instance == "a"
