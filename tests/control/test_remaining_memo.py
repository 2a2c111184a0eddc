"""The controller's remaining-time functions are memoised per request: a reused one must
give the number a fresh one gives, whatever moved since (a step, a migration, a new cap,
a new prediction, a rescaled profile)."""

from __future__ import annotations

from dilaserve.control import ControlConfig, ThresholdController
from dilaserve.predict.base import OneShotPredictor
from tests.control.builders import commit, default_profile, make_request


def _controller() -> ThresholdController:
    cfg = ControlConfig()
    return ThresholdController(cfg, default_profile(), OneShotPredictor({t: 0.5 for t in cfg.thresholds}))


def _fresh(ctl: ThresholdController, req, tokens: float, n: int) -> list[float]:
    fn = ctl._price_remaining(req, 1, tokens, n)
    return [fn(j) for j in range(len(ctl.thresholds))]


def _memo(ctl: ThresholdController, req, tokens: float, n: int) -> list[float]:
    fn = ctl._remaining_fn(req, 1, tokens, n)
    return [fn(j) for j in range(len(ctl.thresholds))]


def test_a_memoised_remaining_time_follows_every_change_of_what_it_prices():
    ctl = _controller()
    req = make_request("r", prompt=300, gen=128, block=32)
    ctl.prepare_arrival(req, 0.0)
    tokens, n = 4000.0, 6
    first = _memo(ctl, req, tokens, n)
    assert _memo(ctl, req, tokens, n) == first == _fresh(ctl, req, tokens, n)
    assert ctl._remaining_fn(req, 1, tokens, n) is ctl._remaining_fn(req, 1, tokens, n)  # reused
    assert _memo(ctl, req, 2 * tokens, n + 3) == _fresh(ctl, req, 2 * tokens, n + 3) != first

    commit(req, 4)  # a step: fewer masked tokens, one more step done
    after_step = _memo(ctl, req, tokens, n)
    assert after_step == _fresh(ctl, req, tokens, n) != first

    req.state.drop_cache()  # migrated: its next step recomputes
    assert _memo(ctl, req, tokens, n) == _fresh(ctl, req, tokens, n) != after_step

    req.cap_index = 2  # load control lowered its cap: the step mix over its life moves
    assert _memo(ctl, req, tokens, n) == _fresh(ctl, req, tokens, n)

    ctl.predictions.refresh([req])  # a new prediction
    assert _memo(ctl, req, tokens, n) == _fresh(ctl, req, tokens, n)


def test_a_rescaled_profile_drops_the_memoised_prices():
    ctl = _controller()
    req = make_request("r", prompt=300, gen=128, block=32)
    ctl.prepare_arrival(req, 0.0)
    before = _memo(ctl, req, 4000.0, 6)
    for curves in (ctl.profile.recompute, ctl.profile.cache):
        for tp, c in curves.items():
            curves[tp] = type(c)(c.tokens, tuple(2 * v for v in c.latency_s))
    ctl.profile_changed()
    after = _memo(ctl, req, 4000.0, 6)
    assert after == _fresh(ctl, req, 4000.0, 6)
    assert all(a > b for a, b in zip(after, before))
