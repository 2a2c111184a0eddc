"""The serve benchmark's summary: refused requests are misses, goodput needs time and truth."""

from dilaserve.bench.serve import Outcome, summarise


def test_goodput_counts_only_requests_on_time_and_correct_over_everything_sent():
    outcomes = [
        Outcome(True, 200, 0.5, True, True, 8, 4, 0.9),  # on time, correct
        Outcome(True, 200, 0.6, True, False, 8, 4, 0.8),  # on time, wrong
        Outcome(True, 200, 9.0, False, True, 8, 4, 0.9),  # late, correct
        Outcome(False, 429, 0.01, False, False, 0, 0, 0.0),  # refused by SLO-aware admission
    ]
    s = summarise(outcomes, wall_s=10.0)
    assert s["goodput"] == 0.25 and s["slo_attainment"] == 0.5
    assert s["errors"] == {"429": 1} and s["completed"] == 3 and s["accuracy"] == 0.5
