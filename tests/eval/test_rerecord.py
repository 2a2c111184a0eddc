"""Re-recording: the recorded commands run again, the report is rewritten, and the
headline numbers that moved (and the margins that fell) are listed."""

from __future__ import annotations

import json

import pytest

from dilaserve.eval import rerecord
from dilaserve.eval.rerecord import compare, headline


def _trace(dilaserve: float, fixed: float, admitted: float) -> dict:
    return {
        "policies": {
            "dilaserve": {"goodput": dilaserve},
            "fixed@0.7": {"goodput": fixed},
            "fixed@0.9": {"goodput": fixed - 0.1},
            "fixed@0.7+admission": {"goodput": admitted},
        },
        "policy_wall_s": {"dilaserve": 30.0, "dilaserve-no-tuner": 10.0},
    }


def test_the_headline_numbers_are_the_margins_the_report_shows():
    trace = headline(_trace(0.8, 0.6, 0.75))
    assert trace["margin"] == pytest.approx(0.05) and trace["margin_without_admission"] == pytest.approx(0.2)
    assert trace["goodput:dilaserve"] == 0.8 and "goodput:fixed@0.7" not in trace
    assert trace["tuner_wall_ratio"] == pytest.approx(3.0)
    frontier = headline(
        {"margin": 0.02, "dilaserve": {"goodput": 0.7}, "dilaserve-no-reconfig": {"goodput": 0.71}, "policies": {}}
    )
    assert frontier["margin"] == 0.02 and frontier["reconfig_gain"] == pytest.approx(-0.01)
    assert headline({"ratio": 1.1, "dilaserve": {"rate": 50.0, "goodput": 0.9}, "rates": {}}) == {"ratio": 1.1}


def test_a_margin_that_falls_past_the_tolerance_is_listed():
    before = {"a": {"output": _trace(0.8, 0.6, 0.75)}, "b": {"output": _trace(0.8, 0.6, 0.75)}}
    after = {"a": {"output": _trace(0.79, 0.6, 0.75)}, "b": {"output": _trace(0.797, 0.6, 0.75)}}
    diff = compare(before, after)
    assert diff.fell == ["a.margin", "a.margin_without_admission"]  # b fell by 0.3 points: within half a point
    assert diff.changes["a"]["goodput:dilaserve"] == [0.8, 0.79] and "wall_s:dilaserve" not in diff.changes["a"]
    same = compare(before, before)
    assert same.changes == {} and same.fell == [] and same.fell_on_other_artifacts == []


def test_a_fall_on_other_artifacts_is_set_apart_and_the_fingerprints_shown():
    before = {"a": {"output": _trace(0.8, 0.6, 0.75), "artifacts": "old"}}
    after = {"a": {"output": _trace(0.79, 0.6, 0.75), "artifacts": "new"}}
    diff = compare(before, after)
    assert diff.fell == [] and diff.fell_on_other_artifacts == ["a.margin", "a.margin_without_admission"]
    assert diff.changes["a"]["artifacts"] == ["old", "new"]
    unchanged = compare(before, {"a": {"output": _trace(0.8, 0.6, 0.75), "artifacts": "new"}})
    assert unchanged.changes == {"a": {"artifacts": ["old", "new"]}}


def test_rerecord_runs_each_recorded_command_again_and_writes_the_report(tmp_path, monkeypatch, capsys):
    """A capacity table (no simulation) recorded with a tampered number, and a record whose
    command fails: the first is recorded afresh, the second kept and reported."""
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "docs" / "results"
    results.mkdir(parents=True)
    cap = "python -m dilaserve.eval capacity --settings paper --json --record cap"
    tampered = {"capacity": {"paper": {"rps": {"1": [1.0]}}}}
    (results / "cap.json").write_text(json.dumps({"command": cap, "machine": {}, "output": tampered}))
    bad = {"command": "python -m dilaserve.eval capacity --settings nowhere --record bad", "output": {}}
    (results / "bad.json").write_text(json.dumps(bad))
    (results / "other.json").write_text(json.dumps({"command": "make results", "output": {}}))
    assert rerecord.main(["--dry-run", "cap"]) == 0
    assert capsys.readouterr().out.strip() == cap
    with pytest.raises(SystemExit):
        rerecord.main(["missing"])
    assert rerecord.main(["bad", "cap", "other"]) == 1
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["rerecorded"] == ["cap"] and set(line["failed"]) == {"bad", "other"}
    assert line["fell"] == [] and line["fell_on_other_artifacts"] == []
    fresh = json.loads((results / "cap.json").read_text())
    assert fresh["command"] == cap and fresh["output"]["capacity"]["paper"]["rps"]["1"][0] > 10
    assert json.loads((results / "bad.json").read_text()) == bad
    assert (tmp_path / "docs" / "results.md").read_text().count("requests/s") >= 1
