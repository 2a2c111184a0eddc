import numpy as np
import pytest

from dilaserve.engine.state import StepKind
from dilaserve.predict.base import OneShotPredictor, OraclePredictor, PredictionBatch
from dilaserve.profile.types import LatencyProfile, MissingTPDegreeError, StepCurve


def test_curve_interpolates_extrapolates_and_clamps():
    c = StepCurve.from_points([(100, 1.0), (200, 2.0), (400, 3.0)])
    assert c(150) == pytest.approx(1.5)
    assert c(300) == pytest.approx(2.5)
    assert c(600) == pytest.approx(4.0)  # last slope 1/200 per token
    assert c(10) == pytest.approx(1.0)  # below the first point: clamped
    np.testing.assert_allclose(c.many(np.array([10, 150, 300, 600])), [1.0, 1.5, 2.5, 4.0])


def test_curve_rejects_bad_points():
    with pytest.raises(ValueError, match="strictly increasing"):
        StepCurve((2.0, 1.0), (1.0, 1.0))
    with pytest.raises(ValueError, match="positive"):
        StepCurve((1.0,), (0.0,))


def test_profile_json_roundtrip_and_cache_fallback(tmp_path):
    p = LatencyProfile("p", {1: StepCurve((1.0, 10.0), (0.1, 0.2))}, {1: StepCurve((1.0,), (0.05,))}, {"gpu": "x"})
    p.save(tmp_path / "p.json")
    q = LatencyProfile.load(tmp_path / "p.json")
    assert q.to_dict() == p.to_dict()
    assert q.latency(1, 5.5, StepKind.CACHE) == pytest.approx(0.05)
    nocache = LatencyProfile("n", {2: StepCurve((1.0,), (0.3,))})
    assert nocache.latency(2, 9, StepKind.CACHE) == pytest.approx(0.3)  # falls back to recompute


def test_missing_tp_degree_is_a_clear_error():
    p = LatencyProfile("p", {1: StepCurve((1.0,), (0.1,))})
    with pytest.raises(MissingTPDegreeError) as e:
        p.latency(4, 100)
    assert "TP-4" in str(e.value) and "[1]" in str(e.value) and "remove 4" in str(e.value)
    assert isinstance(e.value, KeyError)


def test_oneshot_predictor_hand_values():
    pred = OneShotPredictor({0.5: 0.25, 0.9: 0.75})
    # one request: output length 100, 10 steps done (steps ratio 0.1)
    progress = np.array([[100, 0.1, 0.2, 0, 0, 0, 0, 0, 0, 0]])
    out = pred.predict(PredictionBatch.build(["a"], progress, [0.5, 0.7, 0.9]))
    np.testing.assert_allclose(out, [[25 - 10, 50 - 10, 75 - 10]])


def test_predictions_floor_at_one_step():
    pred = OneShotPredictor({0.9: 0.5})
    progress = np.array([[10, 2.0, 0, 0, 0, 0, 0, 0, 0, 0]])  # more steps done than predicted
    assert pred.predict(PredictionBatch.build(["a"], progress, [0.9]))[0, 0] == 1.0


def test_oracle_uses_truth_per_request_and_threshold():
    truth = {("a", 0.5): 3.0, ("a", 0.9): 8.0, ("b", 0.5): 5.0, ("b", 0.9): 11.0}
    pred = OraclePredictor(lambda rid, thr: truth[rid, thr])
    out = pred.predict(PredictionBatch.build(["a", "b"], np.zeros((2, 10)), [0.5, 0.9]))
    np.testing.assert_allclose(out, [[3, 8], [5, 11]])
