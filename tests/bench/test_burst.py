"""bench burst's step-gap probe: it measures the time requests wait with no step finishing,
and an idle spell (nothing waiting) is not a gap."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from dilaserve.bench.burst import GapProbe, main


def test_the_gap_counts_only_while_requests_wait_and_no_step_finishes():
    core = SimpleNamespace(last_step_at=None)
    runtime = SimpleNamespace(handles={}, core=core)
    probe = GapProbe(runtime, every_s=0.01)
    time.sleep(0.2)  # idle: no gap
    runtime.handles["r0"] = object()
    for _ in range(10):  # steps finish every 20 ms: gaps stay short
        core.last_step_at = time.monotonic()
        time.sleep(0.02)
    short = probe.max_gap_s
    time.sleep(0.3)  # waiting, and no step
    gap = probe.stop()
    assert short < 0.15 and gap >= 0.25


def test_bad_options_are_refused_with_the_fix():
    with pytest.raises(SystemExit):
        main(["--burst", "0"])


def test_a_quick_runs_quiet_spell_is_enough_for_the_tuner_to_tune_on():
    """The quick quiet spell (30 s at 1 request/s) must fill the quick tuner's window with
    enough sampled arrivals, and tune more than once, or the burst meets control idle."""
    from dilaserve.bench.burst import QUICK_TUNER

    quiet_s, rps = 30.0, 1.0
    in_window = min(QUICK_TUNER.window_s, quiet_s) * rps
    assert in_window * QUICK_TUNER.sample >= QUICK_TUNER.min_arrivals
    assert QUICK_TUNER.interval_s < quiet_s / 2
