"""Named workloads: the trace's rate curve stretched into load phases, and the tp-necessary
workload's defining property (its interactive tier is out of TP-1's reach)."""

import numpy as np
import pytest

from dilaserve.control.step_law import step_split
from dilaserve.engine.state import StepKind
from dilaserve.profile.analytic import analytic_profile
from dilaserve.sim.arrivals import shape_trace
from dilaserve.sim.scenarios import NAMED_WORKLOADS, diurnal_phases, named_workload, trace_rate_curve
from dilaserve.sim.slo import parse_slo_tiers
from dilaserve.sim.traces import Trace, load_trace


def _trace(rates: list[float], window_s: float = 100.0) -> Trace:
    """Arrivals at ``rates[i]`` requests/s, evenly spaced, in consecutive windows."""
    t = np.concatenate(
        [i * window_s + np.arange(int(r * window_s)) / r for i, r in enumerate(rates)] + [[len(rates) * window_s]]
    )
    n = len(t)
    return Trace("test", t, np.full(n, 100), np.full(n, 64))


def test_rate_curve_counts_each_window():
    curve = trace_rate_curve(_trace([1.0, 3.0, 2.0]), 3)
    assert curve == pytest.approx([1.0, 3.0, 2.0], rel=0.02)
    with pytest.raises(ValueError, match="windows"):
        trace_rate_curve(_trace([1.0]), 0)


def test_diurnal_phases_stretch_the_curve_from_low_to_high():
    phases = diurnal_phases(_trace([1.0, 3.0, 2.0]), 3, low=0.2, high=1.0, capacity_rps=50.0, phase_s=30.0)
    assert [p.rate for p in phases] == pytest.approx([10.0, 50.0, 30.0], rel=0.02)
    assert [p.name for p in phases] == ["low", "high", "high"]  # split at the middle load, 0.6
    assert all(p.duration_s == 30.0 for p in phases)
    with pytest.raises(ValueError, match="low"):
        diurnal_phases(_trace([1.0, 2.0]), 2, low=0.9, high=0.5, capacity_rps=50.0, phase_s=30.0)


def test_named_workload_scales_its_shape_to_a_given_peak():
    named, tr = NAMED_WORKLOADS["tp-necessary"], load_trace()
    own = named.phases(tr, 100.0, quick=True)
    half = named.phases(tr, 100.0, quick=True, peak=named.high / 2)
    assert max(p.rate for p in own) == pytest.approx(100.0 * named.high)
    assert [p.rate for p in half] == pytest.approx([p.rate / 2 for p in own])
    assert {p.duration_s for p in own} == {named.quick_phase_s}
    assert {p.duration_s for p in named.phases(tr, 100.0, quick=False)} == {named.phase_s}
    # The shipped trace's hour rises and falls: its busiest window is neither the first nor the last.
    busiest = int(np.argmax([p.rate for p in own]))
    assert 0 < busiest < len(own) - 1
    wl = shape_trace(tr, own)
    assert {r.phase for r in wl.requests} == {"low", "high"}
    with pytest.raises(ValueError, match="tp-necessary"):
        named_workload("nope")


def _isolated(profile, steps_per_block: float, tp: int, prompt: int = 150, gen: int = 256, block: int = 32) -> float:
    split = step_split(gen / block * steps_per_block, prompt, gen, block, False)
    return split.seconds(profile.curve(tp, StepKind.CACHE), profile.curve(tp, StepKind.RECOMPUTE))


def test_tp_necessary_interactive_tier_is_out_of_tp1_reach_and_within_tp4_reach():
    """The tier's SLO is its scale x a request's isolated TP-1 latency at 0.9. On the
    workload's own lengths (the trace's: long prompts), with the published LLaDA steps per
    block at 0.9 and at 0.7 (dilaserve's lowest threshold within its quality budget on the
    embedded law, whose 0.7 saves fewer steps against 0.9), most requests miss it alone on
    TP-1 at 0.7, and every one makes it on TP-4 at 0.7 with room to batch."""
    profile = analytic_profile("llada-8b", "h100", (1, 2, 4))
    named = NAMED_WORKLOADS["tp-necessary"]
    assert named.lengths == "trace"
    tiers = {t.name: t for t in parse_slo_tiers(named.slo_tiers)}
    steps_at = {0.9: 32 / 3.25, 0.7: 32 / 5.12}  # Fast-dLLM's tokens per step
    tr = load_trace()
    beyond, within = [], []
    for k in np.random.default_rng(0).choice(len(tr.arrival_s), 300, replace=False):
        p, o = int(tr.prompt_tokens[k]), int(tr.output_tokens[k])
        slo = tiers["interactive"].scale * _isolated(profile, steps_at[0.9], 1, p, o)
        beyond.append(_isolated(profile, steps_at[0.7], 1, p, o) > slo)
        within.append(_isolated(profile, steps_at[0.7], 4, p, o) < 0.8 * slo)
    assert np.mean(beyond) > 0.5 and all(within)
    assert tiers["standard"].scale * _isolated(profile, steps_at[0.9], 1) > 2 * _isolated(profile, steps_at[0.9], 1)
