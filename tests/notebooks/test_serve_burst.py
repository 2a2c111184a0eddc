"""The serving app's burst (``dilaserve.serve.app_burst``, **Send a burst** in
``notebooks/serve_app.py``): its default, run by the app headless against a real server on the
embedded model, makes the controller lower thresholds and refuse requests with the server's
reason; the table's cells, the live states and the command-line flag."""

from __future__ import annotations

import ast
import re

import pytest

from dilaserve.serve import app_burst
from dilaserve.serve.client import Completion

from .test_notebooks import run_notebook


def test_threshold_cells():
    assert app_burst.threshold_text([0.9, 0.9, 0.7, 0.8]) == "0.9 \u2192 0.7 on 2 of 4 steps"
    assert app_burst.threshold_text([0.9, 0.9]) == "0.9 on all 2 steps" and app_burst.threshold_text([]) == "\u2013"
    assert app_burst.threshold_text([0.9]) == "0.9 on its one step"
    # A request the controller started below the top: lowered from where it ran alone.
    assert app_burst.threshold_text([0.7, 0.6], top=0.9) == "0.9 \u2192 0.6 on all 2 steps"
    assert app_burst.threshold_text([0.5], top=0.9) == "0.9 \u2192 0.5 on all 1 step"


def test_a_burst_request_says_how_to_fix_bad_values():
    with pytest.raises(ValueError, match="at least one prompt"):
        app_burst.BurstRequest(0, 1.0)
    with pytest.raises(ValueError, match="between 0 and the burst's 4 prompts"):
        app_burst.BurstRequest(4, 1.0, 5)
    assert app_burst.BurstRequest(12, 1.0, 3).tight_indices() == {2, 5, 8}
    assert app_burst.headless_burst("") == app_burst.DEFAULT_BURST == app_burst.headless_burst(True)
    assert app_burst.headless_burst(8) == app_burst.BurstRequest(8, app_burst.DEFAULT_BURST.slo_factor, 2)
    with pytest.raises(ValueError, match="--burst=12"):
        app_burst.headless_burst("many")


def _reply(steps: int, thresholds: list[float], latency_ms: float, slo_ms: float) -> Completion:
    return Completion("a b", steps, thresholds, latency_ms, slo_ms, latency_ms <= slo_ms, ["i0"], "stop")


def test_the_view_is_live_and_tight_requests_get_their_own_slo():
    # The transport answers at once: alone at the top threshold, in the burst lowered, and a
    # tight request refused as the client reports a 400.
    def send(url, r):
        if r.slo_ms == app_burst.ALONE_SLO_MS:
            return _reply(10, [0.9] * 10, 1000.0 + len(r.prompt), r.slo_ms)
        if r.slo_ms < 500:
            raise RuntimeError(f"HTTP 400: slo_ms: an SLO of {r.slo_ms:.0f} ms cannot be met even alone")
        return _reply(6, [0.9, 0.7, 0.5, 0.5, 0.5, 0.5], 900.0, r.slo_ms)

    states = list(app_burst.run_burst("http://loopback", app_burst.BurstRequest(4, 1.0, 1), send))
    assert [s.count("admitted") + s.count("refused") for s in states] == list(range(5))
    last = states[-1]
    assert last.done and last.count("refused") == 1 and last.count("admitted") == 3
    (tight,) = [e for e in last.entries if e.tight]
    assert tight.slo_ms == pytest.approx(app_burst.TIGHT_FACTOR * tight.alone.latency_ms, abs=0.1)
    assert tight.reason.startswith("slo_ms: an SLO of") and "HTTP" not in tight.reason
    assert all(e.lowered for e in last.entries if e.outcome == "admitted")
    rows = app_burst.burst_rows(last)
    assert rows[tight.index]["SLO (ms)"].endswith("(tight)") and "\u2192" in rows[0]["threshold"]
    table = app_burst.burst_table(rows)
    assert table.count("\n") == len(rows) + 1 and "threshold" in table.splitlines()[0]
    assert "1 of them tight" in app_burst.burst_summary(last)


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_the_apps_default_burst_lowers_thresholds_and_refuses_with_a_reason(tmp_path):
    # The app headless, as a person would use it: start the server (no pipeline artifacts,
    # as on a fresh clone), send the default burst, print every request's row.
    out = run_notebook(
        "serve_app", "--start", "--reconfig-interval-s=0", f"--artifacts={tmp_path}", "--burst", timeout=560
    )
    summary = re.search(r"burst: (.*)", out)
    assert summary, out[-4000:]
    rows = [ast.literal_eval(m) for m in re.findall(r"burst request (\{.*\})", out)]
    assert len(rows) == app_burst.DEFAULT_BURST.n, out[-4000:]
    assert {r["outcome"] for r in rows} <= {"admitted", "refused"}
    lowered = [r for r in rows if r["outcome"] == "admitted" and "\u2192" in r["threshold"]]
    refused = [r for r in rows if r["outcome"] == "refused"]
    # Every row and the app's last output in full on a failure (a list would be cut short).
    shown = "\n".join(map(str, rows)) + "\n" + out[-4000:]
    assert lowered, shown
    assert refused and all(r["reason"] and "HTTP" not in r["reason"] for r in refused), shown
    # The view "steps alone / in the burst" gives both counts for every admitted request.
    # (Whether a lowered one saves steps depends on which requests won the race to admission:
    # the long "pairs" examples do, 14 steps alone against 8 or 9 in the burst, a list lowered
    # on its last steps only does not. That a lower threshold takes fewer steps is
    # tests/engine/test_engine.py's, on fixed inputs.)
    admitted = [r for r in rows if r["outcome"] == "admitted"]
    assert all(isinstance(r["steps in the burst"], int) and r["steps in the burst"] >= 1 for r in admitted), rows
    assert all(isinstance(r["steps alone"], int) and r["steps alone"] >= 1 for r in rows), rows
    assert "lowered the threshold" in summary.group(1) and "refused" in summary.group(1)
