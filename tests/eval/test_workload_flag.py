"""``--workload NAME``: a named workload's tiers stand in for ``--slo-tiers``, and an unknown
name is refused with the names."""

import pytest

from dilaserve.eval.__main__ import parse
from dilaserve.eval.context import EvalOptions
from dilaserve.sim.scenarios import NAMED_WORKLOADS


def test_named_workload_brings_its_tiers_unless_given():
    named = NAMED_WORKLOADS["tp-necessary"]
    assert EvalOptions(workload="tp-necessary").tiers_text == named.slo_tiers
    assert EvalOptions(workload="tp-necessary", slo_tiers="a:0.5:1,b:0.5:5").tiers_text == "a:0.5:1,b:0.5:5"
    assert EvalOptions().tiers_text is None


def test_unknown_workload_is_refused_with_the_names(capsys):
    with pytest.raises(ValueError, match="tp-necessary"):
        EvalOptions(workload="nope")
    with pytest.raises(SystemExit):
        parse(["trace", "--quick", "--workload", "nope"])
    assert "tp-necessary" in capsys.readouterr().err
    _, opts, _, _ = parse(["frontier", "--hindsight", "--quick", "--workload", "tp-necessary"])
    assert opts.workload == "tp-necessary" and opts.hindsight


def test_named_workload_brings_its_lengths_unless_given():
    from types import SimpleNamespace

    from dilaserve.eval.context import EvalContext

    paper = SimpleNamespace(name="paper")
    assert EvalContext(EvalOptions(workload="tp-necessary")).lengths_of(paper) == "trace"
    assert EvalContext(EvalOptions(workload="tp-necessary", lengths="gsm8k")).lengths_of(paper) == "gsm8k"
    assert EvalContext(EvalOptions()).lengths_of(paper) == "sharegpt-paper"


def test_a_named_workloads_peak_follows_the_load_a_caller_names(tmp_path):
    """A sweep's or a search's load (``trace_workload(..., high_load=...)``) moves a named
    workload's busiest phase, and the others with it; without one it keeps its own peak (or
    ``--high-load``). Before, max-rate's probes on ``--workload tp-necessary`` all ran the
    same rate."""
    from dilaserve.eval.workloads import trace_workload
    from tests.eval.builders import TinyContext

    def peak(load=None, **options):
        ctx = TinyContext(
            EvalOptions(quick=True, settings=("paper",), out=tmp_path, workload="tp-necessary", **options)
        )
        setting = ctx.settings[0]
        tr = ctx.trace_for(setting)
        cap = ctx.capacity(setting, tr.prompt_tokens, tr.output_tokens)
        rates = [p.rate for p in trace_workload(ctx, setting, high_load=load).phases]
        return max(rates) / cap, min(rates) / max(rates)

    own, contrast = peak()
    assert own == pytest.approx(NAMED_WORKLOADS["tp-necessary"].high)
    assert peak(0.3) == pytest.approx((0.3, contrast))
    assert peak(0.6) == pytest.approx((0.6, contrast))
    assert peak(high_load=0.9) == pytest.approx((0.9, contrast))  # --high-load
    assert peak(0.3, high_load=0.9) == pytest.approx((0.3, contrast))  # the caller's load first
