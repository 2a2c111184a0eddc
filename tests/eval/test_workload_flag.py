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
