"""eval audit: each tuning's candidates replayed on the arrivals that came after it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dilaserve.eval.context import EvalOptions
from dilaserve.eval.tuner_audit import AuditError, TuningAudit, future_arrivals, summarize_audits, tuner_audit
from dilaserve.schedule.tuner import TunerConfig
from dilaserve.sim.simulator import SimConfig
from dilaserve.sim.workload import Workload, WorkloadRequest
from tests.eval.builders import TinyContext


class TunedTinyContext(TinyContext):
    """The tiny context with a quality table for the policy (so it tunes) and the options'
    tuner (a tuning every second of a short run)."""

    def __init__(self, options: EvalOptions):
        super().__init__(options)
        self.predictors = replace(self.predictors, quality=self.quality)

    def sim_config(self) -> SimConfig:
        return SimConfig(reconfig_tick_s=5.0, tuner=self.options.run_tuner)


def _options(tmp_path, **kw) -> EvalOptions:
    return EvalOptions(
        quick=True,
        settings=("paper",),
        phase_s=4.0,
        out=tmp_path,
        jobs=1,
        tuner=TunerConfig(min_arrivals=2, sample=1.0, rise_window_s=1.0),
        tuner_interval_s=1.0,
        tuner_window_s=2.0,
        **kw,
    )


def test_regret_and_leads_are_read_off_the_oracle_and_the_replay():
    a = TuningAudit(
        0,
        10.0,
        True,
        "static@0.8",
        "static@0.7",
        replayed={"static@0.8": 0.90, "static@0.7": 0.93, "static@0.9": 0.85},
        oracle={"static@0.8": 0.92, "static@0.7": 0.91, "static@0.9": 0.80},
        held_s=1.0,
    )
    assert a.oracle_best == "static@0.8"
    assert a.regret == pytest.approx(0.01)  # the future favoured the point it left
    assert a.replayed_lead == pytest.approx(0.03) and a.oracle_lead == pytest.approx(-0.01)
    # A candidate a screen left out replays at -inf, and its JSON says null, not -Infinity.
    screened = TuningAudit(
        0,
        5.0,
        False,
        "static@0.8",
        "static@0.8",
        {"static@0.8": 0.9, "static@0.7": float("-inf")},
        {"static@0.8": 0.9, "static@0.7": 0.8},
        1.0,
    )
    assert json.loads(json.dumps(screened.to_json(), allow_nan=False))["replayed"]["static@0.7"] is None
    kept = TuningAudit(0, 20.0, False, "static@0.8", "static@0.8", {"static@0.8": 0.9}, {"static@0.8": 0.9}, 3.0)
    s = summarize_audits([a, kept])
    assert s["tunings"] == 2 and s["rises"] == 1 and s["switches"] == 1
    assert s["mean_regret"] == pytest.approx(0.005) and s["mean_regret_rises"] == pytest.approx(0.01)
    assert s["mean_regret_intervals"] == 0 and s["chose_oracle_best"] == 0.5
    assert s["mean_regret_held"] == pytest.approx(0.01 * 1.0 / 4.0)  # the regret ran 1 s of 4
    assert s["switch_overpromise"] == pytest.approx(0.04)  # replayed +3 points, the future -1


def test_the_oracle_replays_the_arrivals_after_a_tuning_with_the_runs_slo_where_none_is_given():
    wl = Workload(
        "w",
        [
            WorkloadRequest("a", 1.0, 10, 20),
            WorkloadRequest("b", 2.5, 10, 20, slo_s=9.0, priority=1),
            WorkloadRequest("c", 4.0, 10, 20),
        ],
    )
    future = future_arrivals(wl, 3.0, 1.0, 3.0)
    assert [(f.arrival, f.slo_s, f.priority) for f in future] == [(2.5, 9.0, 1), (4.0, 3.0, 0)]


def test_every_adopted_tuning_is_replayed_on_the_future_and_scored(tmp_path):
    ctx = TunedTinyContext(_options(tmp_path))
    doc, text = tuner_audit(ctx)
    json.dumps(doc)  # one JSON document
    s, tunings = doc["summary"], doc["tunings"]
    assert doc["policy"] == "dilaserve" and doc["horizon_s"] == 2.0 and doc["sample"] == 1.0
    assert s["tunings"] == len(tunings) >= 2
    for t in tunings:
        # The oracle replayed every candidate the tuning weighed, and the chosen one among them.
        assert set(t["oracle"]) == set(t["replayed"]) and t["chosen"] in t["oracle"]
        assert t["start"] == next(iter(t["replayed"]))
        assert all(0 <= g <= 1 for g in t["oracle"].values())
        assert t["regret"] == pytest.approx(max(t["oracle"].values()) - t["oracle"][t["chosen"]])
        assert t["regret"] >= 0
    # Each choice ran until the next tuning, the last for the horizon at most.
    for t, after in zip(tunings, tunings[1:]):
        assert t["held_s"] == pytest.approx(min(after["time"] - t["time"], 2.0))
    assert 0 < tunings[-1]["held_s"] <= 2.0
    assert "| seed | time (s) |" in text


def test_a_policy_that_does_not_tune_or_more_than_one_is_refused_with_what_to_run(tmp_path):
    with pytest.raises(AuditError, match="does not tune"):
        tuner_audit(TunedTinyContext(_options(tmp_path, policies=("fixed@0.8+admission",))))
    with pytest.raises(AuditError, match="one policy"):
        tuner_audit(TunedTinyContext(_options(tmp_path, policies=("dilaserve", "dilaserve-no-reconfig"))))
