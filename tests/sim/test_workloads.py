import numpy as np
import pytest

from dilaserve.sim.arrivals import PhaseSpec, gamma_arrivals, poisson_workload, shape_trace, with_lengths
from dilaserve.sim.lengths import SHAREGPT_OUTPUT, SHAREGPT_PROMPT, sample_lengths
from dilaserve.sim.progress import canvas_length
from dilaserve.sim.traces import load_trace


def test_shaped_trace_has_a_low_and_a_high_phase_at_their_rates():
    tr = load_trace()
    wl = shape_trace(tr, [PhaseSpec("low", 300, 4.0), PhaseSpec("high", 300, 16.0)])
    t = np.array([r.arrival for r in wl.requests])
    phase = np.array([r.phase for r in wl.requests])
    assert (phase[t < 300] == "low").all() and (phase[t >= 300] == "high").all()
    assert (phase == "low").sum() / 300 == pytest.approx(4.0, rel=0.25)
    assert (phase == "high").sum() / 300 == pytest.approx(16.0, rel=0.25)
    # Token counts come from the trace, in trace order.
    assert [r.prompt_tokens for r in wl.requests[:5]] == tr.prompt_tokens[:5].tolist()


def test_gamma_burstiness_keeps_the_rate_and_raises_variance():
    rng = np.random.default_rng(0)
    poisson = np.diff(gamma_arrivals(10.0, 2000, rng, 1.0))
    bursty = np.diff(gamma_arrivals(10.0, 2000, rng, 0.25))
    assert poisson.mean() == pytest.approx(0.1, rel=0.05) and bursty.mean() == pytest.approx(0.1, rel=0.1)
    assert bursty.std() / bursty.mean() > 1.5 * poisson.std() / poisson.mean()
    with pytest.raises(ValueError, match="burstiness"):
        gamma_arrivals(1.0, 10, rng, 0.0)


def test_length_models():
    wl = poisson_workload(5.0, 20, "gsm8k", seed=1)
    assert {(r.prompt_tokens, r.output_tokens) for r in wl.requests} == {(1020, 256)}
    p, o = sample_lengths("sharegpt", 200_000, np.random.default_rng(0))
    assert np.percentile(p, [50, 90, 99]) == pytest.approx([28, 344, 1698], rel=0.05)
    assert np.percentile(o, [50, 90, 99]) == pytest.approx([224, 544, 928], rel=0.05)
    assert o.mean() == pytest.approx(264, rel=0.03) and p.mean() == pytest.approx(140, rel=0.1)
    assert SHAREGPT_PROMPT.quantile(np.array([0.5]))[0] == pytest.approx(28)
    with pytest.raises(ValueError, match="unknown length model"):
        sample_lengths("alpaca", 3, np.random.default_rng(0))
    assert SHAREGPT_OUTPUT.sample(5, np.random.default_rng(0)).min() >= 1


def test_canvas_is_whole_blocks():
    assert [canvas_length(n, 32) for n in (1, 32, 33, 256)] == [32, 32, 64, 256]


def test_with_lengths_keeps_arrivals_and_draws_lengths_from_the_model():
    tr = load_trace()
    assert with_lengths(tr, "trace") is tr
    sg = with_lengths(tr, "sharegpt", seed=1)
    np.testing.assert_array_equal(sg.arrival_s, tr.arrival_s)
    assert np.median(sg.prompt_tokens) == pytest.approx(28, rel=0.15)  # ShareGPT's P50, not the trace's
    assert np.median(tr.prompt_tokens) > 200
    np.testing.assert_array_equal(with_lengths(tr, "sharegpt", seed=1).output_tokens, sg.output_tokens)
    assert not np.array_equal(with_lengths(tr, "sharegpt", seed=2).output_tokens, sg.output_tokens)
    lp = with_lengths(tr, "long-prompt")
    assert lp.output_tokens.max() <= 32 and lp.prompt_tokens.min() >= 512 and "long-prompt lengths" in lp.source
    # A shaped trace replays the drawn lengths.
    wl = shape_trace(lp, [PhaseSpec("low", 30, 4.0)])
    assert [r.prompt_tokens for r in wl.requests[:5]] == lp.prompt_tokens[:5].tolist()
    with pytest.raises(ValueError, match="use 'trace'.*sharegpt"):
        with_lengths(tr, "alpaca")


def test_sharegpt_as_the_paper_builds_it():
    p, o = sample_lengths("sharegpt-paper", 100_000, np.random.default_rng(0))
    assert (o % 32 == 0).all() and o.min() >= 32  # whole 32-token blocks
    assert ((p + o) <= 4096).all()
    # Rounding up lands the published quantiles (whole blocks) on themselves, mean ~264.
    assert np.percentile(o, [50, 90, 99]) == pytest.approx([224, 544, 928], abs=32)
    assert o.mean() == pytest.approx(264, rel=0.03)
    assert np.median(p) == pytest.approx(28, rel=0.1)
