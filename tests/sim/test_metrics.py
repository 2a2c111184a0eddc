"""Per-policy summaries from a hand-built requests frame."""

import polars as pl
import pytest

from dilaserve.sim.metrics import SUMMARY_KEYS, good, summarize
from dilaserve.sim.simulator import REQUEST_COLUMNS


def _frame(rows) -> pl.DataFrame:
    """Rows of (phase, status, met_slo, quality); the other columns are filler."""
    full = [
        {
            "request_id": f"r{i}",
            "phase": ph,
            "status": st,
            "arrival_s": float(i),
            "finish_s": float(i) + 1 if st == "finished" else None,
            "latency_s": 1.0 if st == "finished" else None,
            "deadline_s": float(i) + 2,
            "met_slo": met,
            "prompt_tokens": 10,
            "output_tokens": 32,
            "steps": 4,
            "mean_threshold": 0.9 if st == "finished" else None,
            "quality": q,
        }
        for i, (ph, st, met, q) in enumerate(rows)
    ]
    return pl.DataFrame(full, schema=REQUEST_COLUMNS)


def test_goodput_weights_in_time_requests_by_quality_and_counts_the_rest_as_zero():
    frame = _frame(
        [
            ("low", "finished", True, 1.0),  # in time, correct: 1
            ("low", "finished", True, 0.5),  # in time, half right: 0.5
            ("low", "finished", False, 1.0),  # late: 0, however good
            ("high", "rejected", False, None),  # rejected: 0
            ("high", "unfinished", False, None),  # never finished: 0
            ("high", "finished", True, 0.25),
        ]
    )
    assert good(frame).to_list() == [1.0, 0.5, 0.0, 0.0, 0.0, 0.25]
    s = summarize(frame)
    assert s.goodput == pytest.approx(1.75 / 6)
    assert s.goodput_low == pytest.approx(1.5 / 3) and s.goodput_high == pytest.approx(0.25 / 3)
    # Goodput is below attainment (quality < 1) and below quality (misses count 0).
    assert s.slo_attainment == pytest.approx(3 / 6) and s.quality == pytest.approx(2.75 / 4)
    assert s.rejected == 1 and s.finished == 4
    js = s.as_json()
    assert set(js) == set(SUMMARY_KEYS) and js["goodput"] == pytest.approx(1.75 / 6)


def test_goodput_without_phases_or_requests():
    s = summarize(_frame([("all", "finished", True, 0.8), ("all", "finished", True, 0.6)]))
    assert s.goodput == pytest.approx(0.7) and s.goodput_low is None and s.goodput_high is None
    assert summarize(_frame([])).goodput == 0.0
