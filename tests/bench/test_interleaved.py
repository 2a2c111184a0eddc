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


def test_capacity_repeats_over_seeds_and_reports_the_spread():
    out = run(QUICK.__class__(**{**QUICK.__dict__, "repeats": 2}), ("long-prompt",))
    w = out["workloads"]["long-prompt"]
    assert w["repetitions"] == 2 and w["ratio_spread"] >= 0 and out["settings"]["repeats"] == 2
    one = [run(QUICK.__class__(**{**QUICK.__dict__, "seed": s}), ("long-prompt",))["workloads"]["long-prompt"]["ratio"]
           for s in (0, 1)]
    assert w["ratio"] == pytest.approx(sum(one) / 2, abs=2e-3)  # the median of two is their mean
    assert w["ratio_spread"] == pytest.approx(abs(one[0] - one[1]), abs=2e-3)
