"""max-rate: the highest rate each policy holds at the target attainment, found in few runs."""

from __future__ import annotations

import json

import pytest

from dilaserve.eval.__main__ import parse
from dilaserve.eval.context import EvalOptions
from dilaserve.eval.max_rate import MAX_LOAD, MaxRateError, RateSearch, max_rate
from tests.eval.builders import TinyContext


def _run(search: RateSearch, attainment) -> int:
    """Drive ``search`` on a made-up attainment curve; returns the probes it took."""
    n = 0
    while (load := search.next_load()) is not None:
        search.observe(load, attainment(load))
        n += 1
        assert n < 50, search.probes
    return n


# (knee, most probes): plain bisection from the same bracket takes 7, 5, 6, 5, 7, 7.
@pytest.mark.parametrize("knee, most", [(0.37, 6), (0.93, 4), (1.0, 5), (1.26, 6), (1.6, 5), (2.9, 8)])
def test_the_search_brackets_then_narrows_to_the_tolerance_in_few_probes(knee, most):
    def attainment(load):  # falls linearly past the knee, crossing 0.9 at knee + 0.1 / 1.5
        return min(1.0, 1.0 - 1.5 * (load - knee))

    crossing = knee + 0.1 / 1.5
    search = RateSearch(target=0.9, tol=0.05, start=1.0)
    probes = _run(search, attainment)
    assert search.held <= crossing < search.missed  # the answer is bracketed ...
    assert search.missed / search.held <= 1.05 + 1e-9  # ... to within the tolerance
    assert probes <= most, search.probes


def test_a_bent_curve_still_converges_and_a_tighter_tolerance_costs_few_more_probes():
    def attainment(load):  # a cliff: flat, then a drop at 1.2 (interpolation is no help)
        return 0.99 if load < 1.2 else 0.3

    loose, tight = RateSearch(0.9, 0.05, 1.0), RateSearch(0.9, 0.01, 1.0)
    n_loose, n_tight = _run(loose, attainment), _run(tight, attainment)
    assert loose.held < 1.2 <= loose.missed and tight.missed / tight.held <= 1.01 + 1e-9
    assert n_loose <= 5 and n_tight <= n_loose + 4  # plain bisection: 6 and 8


def test_the_search_stops_at_its_bounds():
    never = RateSearch(0.9, 0.05, 1.0)
    _run(never, lambda load: 0.5)
    assert never.held is None  # misses even at the lowest load: holds no rate
    always = RateSearch(0.9, 0.05, 1.0)
    _run(always, lambda load: 1.0)
    assert always.held == MAX_LOAD and always.missed is None
    # A run that breaks the fall with load does not move the answer above a miss.
    odd = RateSearch(0.9, 0.05, 1.0, {1.0: 0.95, 1.2: 0.5, 1.4: 0.95})
    assert odd.held == 1.0 and odd.missed == 1.2


def _tiny(tmp_path, policies, **options) -> TinyContext:
    """The tiny cluster and trace, 3-s phases, a coarse tolerance: a search in seconds."""
    opts = dict(quick=True, settings=("paper",), phase_s=3.0, out=tmp_path, jobs=1, rate_tol=0.2)
    return TinyContext(EvalOptions(**opts, policies=policies, **options))


def test_max_rate_reports_each_policy_the_best_static_one_and_the_ratio(tmp_path):
    out, text = max_rate(_tiny(tmp_path, ("dilaserve", "infaas", "fixed@0.9", "fixed@0.5+admission")))
    assert set(out) == {
        "target",
        "criterion",
        "quality_ceiling",
        "seeds",
        "rates",
        "best_static",
        "dilaserve",
        "ratio",
        "probes",
    }
    rates = out["rates"]
    assert set(rates) == {"dilaserve", "infaas", "fixed@0.9", "fixed@0.5+admission"}
    assert rates["infaas"] == rates["fixed@0.9"]  # the same run: one search serves both
    best = out["best_static"]
    assert best["policy"] in ("infaas", "fixed@0.9", "fixed@0.5+admission")
    assert best["rate"] == max(rates[p] for p in ("infaas", "fixed@0.5+admission"))
    d = out["dilaserve"]
    assert d["rate"] == rates["dilaserve"] > 0 and 0 <= d["goodput"] <= 1 and d["attainment"] >= 0.9
    assert out["ratio"] == pytest.approx(d["rate"] / best["rate"])
    assert "| dilaserve |" in text and "simulator runs" in text
    # Every probe of each search, in load order; the rate held is one of them, and above it
    # the lowest probe missed the target.
    for name, probes in out["probes"].items():
        loads = [p["load"] for p in probes]
        assert loads == sorted(loads) and len(set(loads)) == len(loads)
        held = [p for p in probes if p["rate"] == rates[name]]
        assert rates[name] == 0 or (held and held[0]["attainment"] >= 0.9)
        above = [p for p in probes if p["rate"] > rates[name]]
        assert not above or above[0]["attainment"] < 0.9
    assert out["probes"]["infaas"] == out["probes"]["fixed@0.9"]
    folder = tmp_path / "max-rate"
    assert json.loads((folder / "max_rate.json").read_text()) == out
    assert (folder / "summary.md").read_text().strip() == text
    assert (folder / "max_rate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_max_rate_refuses_a_list_without_dilaserve_or_a_static_policy_and_several_settings(tmp_path):
    opts = EvalOptions(quick=True, settings=("paper",), out=tmp_path, jobs=1, policies=("dilaserve", "oracle"))
    with pytest.raises(MaxRateError, match="at least one static policy"):
        max_rate(TinyContext(opts))
    with pytest.raises(SystemExit):
        parse(["max-rate", "--settings", "paper", "embedded"])
    with pytest.raises(ValueError, match="--target"):
        EvalOptions(target=1.5)
    with pytest.raises(ValueError, match="--rate-tol"):
        EvalOptions(rate_tol=0)
    assert parse(["max-rate", "--target", "0.8"])[1].settings == ("paper",)


def test_the_goodput_criterion_holds_a_rate_only_with_correct_answers(tmp_path):
    """Under ``--criterion goodput`` a rate held by fast wrong answers is not held: a policy
    at threshold 0.5 (whose answers are mostly wrong on the embedded law) holds no more than
    under attainment, and every rate reported holds the target of the quality ceiling."""
    policies = ("dilaserve", "fixed@0.5+admission", "fixed@0.8+admission")
    by_attainment, _ = max_rate(_tiny(tmp_path, policies))
    by_goodput, text = max_rate(_tiny(tmp_path, policies, criterion="goodput"))
    assert by_attainment["criterion"] == "attainment" and by_attainment["quality_ceiling"] is None
    ceiling = by_goodput["quality_ceiling"]
    assert by_goodput["criterion"] == "goodput" and 0 < ceiling <= 1
    for name, rate in by_goodput["rates"].items():
        assert rate <= by_attainment["rates"][name] + 1e-9  # goodput <= attainment x quality
    d = by_goodput["dilaserve"]
    assert d["rate"] == 0 or d["goodput"] >= 0.9 * ceiling
    assert by_goodput["rates"]["fixed@0.5+admission"] < by_attainment["rates"]["fixed@0.5+admission"]
    assert "goodput over the quality ceiling" in text


def test_an_unknown_criterion_says_which_exist():
    with pytest.raises(ValueError, match="--criterion 'speed' is unknown: use one of attainment, goodput"):
        EvalOptions(criterion="speed")


def test_a_static_point_per_tier_is_searched_as_the_frontier_runs_it(tmp_path):
    """A point named as ``frontier --hindsight`` names it runs ``fixed@DEFAULT`` with the
    tiers pinned: on the tiny trace every request is in priority 0, so pinning it to 0.5
    over a default of 0.9 holds what ``fixed@0.5`` holds, and it counts as a static point."""
    point = "tiers(0:0.5,*:0.9)"
    out, text = max_rate(_tiny(tmp_path, ("dilaserve", "fixed@0.5", "fixed@0.9", point)))
    rates = out["rates"]
    assert rates[point] == rates["fixed@0.5"] != rates["fixed@0.9"]
    assert out["best_static"]["rate"] == max(rates[p] for p in ("fixed@0.5", "fixed@0.9", point))
    assert f"| {point} |" in text
    with pytest.raises(ValueError, match="pins every tier"):
        EvalOptions(policies=("dilaserve", "tiers(0:0.5)"))
    with pytest.raises(ValueError, match="tiers\\(PRIORITY:TAU"):
        EvalOptions(policies=("dilaserve", "tiers(0:0.5,*:0.9"))


def test_a_static_point_on_a_named_tp_mix_is_searched_on_that_cluster(tmp_path):
    """``fixed@0.9 tp=4`` (as the frontier labels a point on its own TP mix) runs the static
    point on a cluster of TP-4 instances: on the tiny node, one TP-4 instance against four
    TP-1, so it holds another rate than ``fixed@0.9`` on all TP-1, and it counts as a static
    point (the best static point may name its mix)."""
    on_tp4 = "fixed@0.9 tp=4"
    out, text = max_rate(_tiny(tmp_path, ("dilaserve", "fixed@0.9", on_tp4)))
    rates = out["rates"]
    assert set(rates) == {"dilaserve", "fixed@0.9", on_tp4}
    assert rates[on_tp4] != rates["fixed@0.9"]
    assert out["probes"][on_tp4] != out["probes"]["fixed@0.9"]
    assert out["best_static"]["rate"] == max(rates["fixed@0.9"], rates[on_tp4])
    assert f"| {on_tp4} |" in text


def test_a_named_tp_mix_is_refused_where_it_cannot_run():
    with pytest.raises(ValueError, match="only a static policy runs on a named TP mix"):
        EvalOptions(policies=("dilaserve", "dilaserve tp=4"))
    with pytest.raises(ValueError, match="'3' names no TP mix; use one of 1, 2, 4, stage1"):
        EvalOptions(policies=("dilaserve", "fixed@0.7 tp=3"))
    assert EvalOptions(policies=("dilaserve", "fixed@0.7 tp=4,1+1+1+1")).policies[1] == "fixed@0.7 tp=4,1+1+1+1"
    with pytest.raises(SystemExit):  # the other experiments start every policy from one cluster
        parse(["trace", "--quick", "--policies", "dilaserve", "fixed@0.7 tp=4"])
    assert parse(["max-rate", "--quick", "--policies", "dilaserve", "fixed@0.7 tp=4"])[1].policies[1].endswith("tp=4")


def test_a_probe_at_several_seeds_pools_their_busiest_phases_request_by_request(tmp_path):
    """``--seeds``: a probe is its runs at every seed pooled, each request weighing alike.
    The tiny trace's arrivals do not depend on the seed (its step outcomes do), so both runs
    hold the same requests and the pooled probe is the mean of the one-seed probes."""
    policies = ("dilaserve", "fixed@0.8+admission")
    alone = {s: max_rate(_tiny(tmp_path / str(s), policies, seed=s))[0] for s in (0, 1)}
    pooled, text = max_rate(_tiny(tmp_path / "both", policies, seeds=(0, 1)))
    assert pooled["seeds"] == [0, 1] and alone[0]["seeds"] == [0]
    assert "each probe pools seeds 0, 1" in text
    by_load = [{p["load"]: p for p in out["probes"]["dilaserve"]} for out in (alone[0], alone[1])]
    shared = [p for p in pooled["probes"]["dilaserve"] if all(p["load"] in b for b in by_load)]
    differ = [p for p in shared if by_load[0][p["load"]]["goodput"] != by_load[1][p["load"]]["goodput"]]
    assert differ, "the seeds' step outcomes should move dilaserve's goodput at some load"
    for p in shared:
        runs = [b[p["load"]] for b in by_load]
        assert p["goodput"] == pytest.approx((runs[0]["goodput"] + runs[1]["goodput"]) / 2)
        assert p["attainment"] == pytest.approx((runs[0]["attainment"] + runs[1]["attainment"]) / 2)
        assert p["rate"] == pytest.approx(runs[0]["rate"])


def test_seeds_are_distinct_and_pool_only_runs_at_one_load():
    with pytest.raises(ValueError, match="distinct seeds"):
        EvalOptions(seeds=(1, 1))
    with pytest.raises(SystemExit):
        parse(["trace", "--seeds", "0", "1"])  # a load sweep: pass --high-load
    with pytest.raises(SystemExit):
        parse(["frontier", "--seeds", "0", "1"])
    assert parse(["trace", "--high-load", "1.0", "--seeds", "0", "1"])[1].run_seeds == (0, 1)
    assert parse(["ablation", "--seeds", "0", "2"])[1].run_seeds == (0, 2)
    assert parse(["max-rate", "--seeds", "0", "1", "2"])[1].run_seeds == (0, 1, 2)
    assert parse(["max-rate", "--seed", "3"])[1].run_seeds == (3,)
