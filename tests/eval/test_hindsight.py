"""frontier --hindsight: the static grid on one workload, and dilaserve's margin over its best."""

from __future__ import annotations

import pytest

from dilaserve.eval.context import EvalOptions
from dilaserve.eval.experiments import frontier
from dilaserve.eval.hindsight import LayoutError, mix_layout
from dilaserve.eval.report import extra_json
from tests.eval.builders import TinyContext
from tests.sim.builders import small_setting, varied_dynamics


def test_the_grid_covers_threshold_admission_and_mix_and_the_margin_is_against_its_best(tmp_path):
    ctx = TinyContext(EvalOptions(quick=True, settings=("paper",), phase_s=3.0, out=tmp_path, hindsight=True, jobs=1))
    out = frontier(ctx)
    verdict = extra_json(out)
    labels = {r.result.policy for r in out.runs}
    # Admission on and off on TP-1 at every candidate; admission on the other static mixes.
    assert {"fixed@0.5", "fixed@0.9", "fixed@0.5+admission", "fixed@0.9+admission"} <= labels
    assert sum(label.endswith("tp=2") for label in labels) == 3  # quick: TP-1's three best thresholds
    assert "fixed@0.7 tp=2" not in labels  # quick: admission off on TP-1 only
    grid = {r.result.policy: r.result.summary.goodput for r in out.runs if r.result.policy.startswith("fixed@")}
    best = max(grid, key=grid.get)
    assert verdict["best_static"]["policy"] == best and verdict["best_static"]["goodput"] == grid[best]
    assert verdict["margin"] == pytest.approx(verdict["dilaserve"]["goodput"] - grid[best])
    assert set(verdict) >= {"dilaserve", "dilaserve-no-reconfig", "mixes", "dilaserve_tunings"}
    # What the verdict cost: every run it reported (grid, dilaserve and its variant), and the time.
    assert verdict["runs"] == len(labels) and verdict["wall_s"] > 0


def test_with_tiers_the_search_also_pins_one_threshold_per_tier(tmp_path):
    ctx = TinyContext(
        EvalOptions(
            quick=True,
            settings=("paper",),
            phase_s=3.0,
            out=tmp_path,
            hindsight=True,
            jobs=1,
            slo_tiers="fast:0.5:2,slow:0.5:10",
        )
    )
    out = frontier(ctx)
    labels = {r.result.policy for r in out.runs}
    tiered = {label for label in labels if label.startswith("tiers(")}
    assert tiered, labels
    # Each move changes one tier from the best uniform threshold.
    for label in tiered:
        pins = label[len("tiers(") : label.index(")")].split(",")
        assert len(pins) == 2 and len({p.split(":")[1] for p in pins}) == 2
    verdict = extra_json(out)
    assert verdict["best_static"]["goodput"] >= max(
        r.result.summary.goodput for r in out.runs if r.result.policy in tiered
    )


def test_a_malformed_tier_spec_or_mix_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="NAME:SHARE:SCALE"):
        EvalOptions(slo_tiers="interactive")
    with pytest.raises(ValueError, match="--static-tp"):
        EvalOptions(static_tp="8")


def test_an_explicit_layout_starts_the_cluster_from_those_instances_per_node():
    setting = small_setting(varied_dynamics(), nodes=2)  # two nodes of 4 GPUs, TP 1/2/4
    assert EvalOptions(static_tp="4,2+1+1").static_tp == "4,2+1+1"
    layout = mix_layout(setting, "4,2+1+1", None, 1.0)
    assert sorted(s.tp for s in layout) == [1, 1, 2, 4]
    assert [s.node for s in layout if s.tp < 4] == [1, 1, 1]
    assert sorted(g for s in layout if s.node == 1 for g in s.gpus) == [0, 1, 2, 3]  # no GPU twice
    with pytest.raises(ValueError, match="one entry per node"):
        EvalOptions(static_tp="4,x")
    with pytest.raises(LayoutError, match="2 nodes"):
        mix_layout(setting, "4,4,4", None, 1.0)
    with pytest.raises(LayoutError, match="more than 4 GPUs"):
        mix_layout(setting, "4,4+1", None, 1.0)
