"""Ratios from interleaved repetitions: a slow spell on the machine hits both sides."""

import pytest

from dilaserve.bench.capacity import QUICK, run
from dilaserve.bench.common import interleaved, median_ratio


def test_repetitions_alternate_between_the_measurements():
    order = []
    runs = interleaved({"a": lambda: order.append("a") or 2.0, "b": lambda: order.append("b") or 1.0}, 3)
    assert order == ["a", "b", "a", "b", "a", "b"] and runs == {"a": [2.0] * 3, "b": [1.0] * 3}


def test_a_slow_spell_during_one_repetition_moves_the_median_ratio_little():
    # Repetition 2 ran while another process took half the machine: both sides slowed.
    fast = [10.0, 5.0, 10.2]
    slow = [5.0, 2.6, 5.0]
    median, spread = median_ratio(fast, slow)
    assert median == pytest.approx(2.0) and spread == pytest.approx(2.04 - 1.923, abs=1e-3)
    assert median_ratio([1.0], [0.0]) == (None, None)


def test_capacity_repeats_each_shape_over_seeds_in_turn_and_reports_the_spread(monkeypatch):
    from dilaserve.bench import capacity

    calls = []

    def fake_measure(ctx, setting, lengths, cfg, name):
        calls.append((cfg.seed, name))
        r = {0: 0.9, 1: 1.1, 2: 1.0}[cfg.seed]
        return {"predicted_rps": 10.0, "measured_rps": 10.0 * r, "ratio": r, "requests": 5, "window_s": [1.0, 2.0]}

    monkeypatch.setattr(capacity, "measure", fake_measure)
    out = run(QUICK.__class__(**{**QUICK.__dict__, "repeats": 3}), ("gsm8k", "long-prompt"))
    assert calls == [
        (0, "gsm8k"),
        (0, "long-prompt"),
        (1, "gsm8k"),
        (1, "long-prompt"),
        (2, "gsm8k"),
        (2, "long-prompt"),
    ]
    for w in out["workloads"].values():
        assert w["ratio"] == 1.0 and w["ratio_spread"] == pytest.approx(0.2) and w["repetitions"] == 3
        assert w["measured_rps"] == 10.0
    assert out["max_abs_error"] == 0.0 and out["settings"]["repeats"] == 3
