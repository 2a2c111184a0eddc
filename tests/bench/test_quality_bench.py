"""``python -m dilaserve.bench quality --quick``: structure and sanity of the comparison."""

import json

import pytest

from dilaserve import artifacts
from dilaserve.bench.__main__ import main as bench_main


@pytest.fixture
def artifacts_built():
    try:
        artifacts.load_threshold_quality()
        artifacts.load_predictor()
    except FileNotFoundError as exc:  # a fresh checkout before `make artifacts`
        pytest.skip(str(exc))


def test_quick_quality_bench(artifacts_built, capsys):
    assert bench_main(["quality", "--quick", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = out["rows"]
    assert {(r["policy"], r["load"]) for r in rows} == {("fixed@0.9", 1.0), ("dilaserve", 1.0)}
    for r in rows:
        for k in ("model_quality", "replay_quality", "own_estimate"):
            assert 0.0 <= r[k] <= 1.0
        assert r["error_pp"] == pytest.approx(100 * (r["replay_quality"] - r["model_quality"]), abs=0.02)
        assert r["model_finished"] > 0 and r["replay_finished"] > 0
    fixed = next(r for r in rows if r["policy"] == "fixed@0.9")
    # A fixed-threshold request is estimated at the table's accuracy, in replay and on the
    # model's own requests alike, and never varies its threshold.
    assert fixed["varied_share"] == 0.0 and fixed["own_estimate"] == pytest.approx(fixed["replay_quality"])
    assert out["max_abs_error_pp"] == max(abs(r["error_pp"]) for r in rows)
    assert out["max_abs_own_error_pp"] == max(abs(r["own_error_pp"]) for r in rows)
    assert out["estimator"]["estimator"]
