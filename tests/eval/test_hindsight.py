"""frontier --hindsight: the static grid on one workload, and dilaserve's margin over its best."""

from __future__ import annotations

import pytest

from dilaserve.eval.context import EvalOptions
from dilaserve.eval.experiments import frontier
from dilaserve.eval.hindsight import GridPoint, LayoutError, mix_layout, single_moves, tier_search
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
    # It names its TP mix: the grid's name for it, and that mix's TP degrees.
    mix = best.split(" tp=")[1] if " tp=" in best else "1"
    assert verdict["best_static"]["mix"] == mix
    assert verdict["best_static"]["tp_degrees"] == verdict["mixes"][mix]
    assert verdict["margin"] == pytest.approx(verdict["dilaserve"]["goodput"] - grid[best])
    assert set(verdict) >= {"dilaserve", "dilaserve-no-reconfig", "mixes", "dilaserve_tunings"}
    # What the verdict cost: every run it reported (grid, dilaserve and its variant), and the time.
    assert verdict["runs"] == len(labels) and verdict["wall_s"] > 0


def test_with_tiers_the_search_converges_and_the_verdict_breaks_each_side_down_per_tier(tmp_path):
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
    goodput = {r.result.policy: r.result.summary.goodput for r in out.runs}
    tiered = {label for label in goodput if label.startswith("tiers(")}
    assert tiered, goodput
    verdict = extra_json(out)
    assert verdict["best_static"]["goodput"] >= max(goodput[label] for label in tiered)
    # Every static point is counted once (the label is the point), and the search ran until
    # a pass found no better single move.
    assert verdict["points_tried"] == len(goodput) - 2  # all but dilaserve and its variant
    assert verdict["search_passes"] >= 1
    for side in ("best_static", "dilaserve"):
        tiers = verdict[side]["tiers"]
        assert set(tiers) == {"fast", "slow"}
        assert sum(t["requests"] for t in tiers.values()) == len(out.runs[0].result.requests)
        for t in tiers.values():
            assert {"slo_attainment", "goodput", "p99_latency_s"} <= set(t) and 0 <= t["goodput"] <= 1
        # The tiers' goodputs pool into the run's.
        total = sum(t["goodput"] * t["requests"] for t in tiers.values()) / sum(t["requests"] for t in tiers.values())
        assert total == pytest.approx(verdict[side]["goodput"])
    # The summary says the same per tier, and how far the search went.
    assert any("tier fast" in n and "p99" in n for n in out.notes)
    assert any(f"{verdict['points_tried']} static points tried" in n for n in out.notes)


class _Landscape:
    """A runner over a made-up goodput: the best point pins priority 1 to 0.9 and priority
    0 to 0.8, on the ``2`` mix, two moves from any uniform point (so one pass cannot reach it)."""

    def __init__(self):
        self.results: dict[str, float] = {}

    def run(self, jobs):
        for label, policy, layout, point in jobs:
            uniform = float(policy.split("@")[1].split("+")[0])  # fixed@TAU or fixed@TAU+admission
            high, low = (uniform, uniform) if point is None else (point.pin(1), point.pin(0))
            score = -abs(high - 0.9) - abs(low - 0.8) + (0.05 if layout == "two" else 0.0)
            self.results[label] = score + (0.01 if policy.endswith("+admission") else 0.0)

    def goodput(self, label):
        return self.results[label]


def test_the_search_keeps_moving_until_no_single_move_gains():
    runner = _Landscape()
    start = GridPoint(0.7, True, "1")
    runner.run([(start.label, start.policy, None, None)])
    best, passes = tier_search(runner, start, [1, 0], (0.5, 0.6, 0.7, 0.8, 0.9), {"1": None, "2": "two"})
    assert (best.tiers.pin(1), best.tiers.pin(0), best.mix, best.admission) == (0.9, 0.8, "2", True)
    assert passes >= 3  # one tier, then the other, then the mix, then a pass that finds nothing
    # Converged: no single move from the result gains.
    moves = single_moves(best, [1, 0], (0.5, 0.6, 0.7, 0.8, 0.9), {"1": None, "2": "two"})
    assert all(runner.goodput(m.label) <= runner.goodput(best.label) for m in moves)
    # A pin back at the default threshold is the uniform point: one label, one run.
    back = single_moves(GridPoint(0.7, True, "1"), [1], (0.8,), {})[0]
    assert single_moves(back, [1], (0.7,), {})[0] == GridPoint(0.7, True, "1")


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
