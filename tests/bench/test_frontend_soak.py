"""``bench frontend`` and ``bench soak``, short: they run the real server in-process, report
what they promise, and the front end stays responsive while every solve is slowed."""

import json

import pytest

from dilaserve.bench import frontend, soak

pytestmark = [pytest.mark.timeout(900), pytest.mark.integration]  # the real server and its Ray cluster


def last_json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_frontend_reports_latencies_stalls_and_the_big_body(capsys):
    args = ["--phase-s", "4", "--solve-s", "1", "--reconfig-interval-s", "1.5", "--big-mb", "2", "--json"]
    assert frontend.main(args) == 0
    out = last_json(capsys)
    assert out["big_body_status"] == 413  # over the default 1 MiB limit
    assert out["solves"] >= 2 and out["solve_s_min"] >= 1.0
    for key in ("health_p99_ms", "completion_p99_extra_ms", "loop_stall_ms_max"):
        assert out[key] is not None, key
    # A solve of 1 s runs on the engine core's thread: the HTTP loop is never held for it.
    assert out["loop_stall_ms_max"] < 500 and out["health_p99_ms"] < 500


def test_soak_loses_nothing_and_reports_memory(capsys):
    assert soak.main(["--minutes", "0.4", "--warmup-minutes", "0.1", "--request-rate", "2", "--json"]) == 0
    out = last_json(capsys)
    assert out["lost"] == 0 and out["completed"] >= 1 and out["in_flight_after"] == 0
    assert out["rss_growth"] is not None and out["p99_ms"] is not None and out["loop_stall_ms_max"] is not None
    assert out["completed"] + sum(out["errors"].values()) == out["requests"]
