import dataclasses

import pytest

from dilaserve.engine.state import StepKind
from dilaserve.profile.analytic import GPUS, MODELS, RECOMPUTE_GRID, ROOFLINE, analytic_profile, calibrate, step_latency
from dilaserve.profile.types import LatencyProfile

PAIRS = [(m, g) for m in MODELS for g in GPUS]


@pytest.mark.parametrize("model,gpu", PAIRS)
def test_reproduces_calibration_points(model, gpu):
    prof = analytic_profile(model, gpu)
    n = ROOFLINE.calibration_tokens
    base = step_latency(MODELS[model], GPUS[gpu], 1, n, StepKind.RECOMPUTE)
    for tp, target in ROOFLINE.targets.items():
        exact = step_latency(MODELS[model], GPUS[gpu], tp, n, StepKind.RECOMPUTE) / base
        assert exact == pytest.approx(target, abs=1e-9)
        # the stored piecewise-linear curve stays close at the calibration point
        assert prof.latency(tp, n) / prof.latency(1, n) == pytest.approx(target, abs=0.01)
    assert prof.latency(8, n) < prof.latency(4, n), "TP-8 keeps cutting latency"


@pytest.mark.parametrize("model,gpu", PAIRS)
def test_curves_are_monotone_and_cache_steps_cheaper(model, gpu):
    prof = analytic_profile(model, gpu)
    for tp in prof.tp_degrees:
        lat = prof.recompute[tp].latency_s
        assert all(b >= a for a, b in zip(lat, lat[1:]))
        reqs = 8  # the same 8 requests: a cache step feeds one block each, a recompute step everything
        assert prof.latency(tp, reqs * ROOFLINE.block_length, StepKind.CACHE) < prof.latency(
            tp, reqs * ROOFLINE.context
        )


def test_a100_is_slower_than_h100():
    n = RECOMPUTE_GRID[10]
    assert analytic_profile("llada-8b", "a100").latency(1, n) > analytic_profile("llada-8b", "h100").latency(1, n)


def test_profile_survives_json_and_keeps_its_parameters(tmp_path):
    prof = analytic_profile("dream-7b", "h100", tp_degrees=(1, 2, 4))
    prof.save(tmp_path / "p.json")
    back = LatencyProfile.load(tmp_path / "p.json")
    assert back.tp_degrees == (1, 2, 4)
    assert back.latency(2, 5000, StepKind.CACHE) == pytest.approx(prof.latency(2, 5000, StepKind.CACHE))
    assert back.meta["roofline"]["compute_eff"] == ROOFLINE.compute_eff
    assert set(back.meta["scaling"]) == {"1", "2", "4", "8"}


def test_unreachable_target_is_a_clear_error():
    slow_links = dataclasses.replace(ROOFLINE, allreduce_latency_s=1.0)
    with pytest.raises(ValueError, match="cannot reach"):
        calibrate(MODELS["llada-8b"], GPUS["h100"], slow_links)


def test_unknown_model_names_the_choices():
    with pytest.raises(ValueError, match="llada-8b"):
        analytic_profile("gpt-9", "h100")


@pytest.mark.parametrize("model,gpu", PAIRS)
def test_block_mode_keeps_the_calibration_and_attends_to_less(model, gpu):
    bi, bc = analytic_profile(model, gpu), analytic_profile(model, gpu, block_causal=True)
    assert bc.name == f"{model}-{gpu}-block" and bc.meta["block_causal"]
    n = ROOFLINE.calibration_tokens
    for tp, target in ROOFLINE.targets.items():
        assert bc.latency(tp, n) / bc.latency(1, n) == pytest.approx(target, abs=0.01)
    # a block step reads the prompt and the finished blocks, not the whole canvas; a prefill
    # attends causally across blocks: neither costs more than its bidirectional counterpart
    for tokens in (32, 1024, 8192):
        assert bc.latency(1, tokens, StepKind.CACHE) <= bi.latency(1, tokens, StepKind.CACHE)
    assert bc.latency(1, n) <= bi.latency(1, n)
