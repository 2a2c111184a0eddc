"""The eval harness: tables, plots, the JSON line, and clean failures."""

import json
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from dilaserve.eval.__main__ import main, parse
from dilaserve.eval.context import EvalContext, EvalOptions
from dilaserve.eval.report import extra_json, policies_json, write
from dilaserve.profile.analytic import analytic_profile
from dilaserve.sim.arrivals import PhaseSpec, shape_trace
from dilaserve.sim.metrics import SUMMARY_KEYS
from tests.eval.builders import TinyContext, tiny_trace_runs
from tests.sim.builders import quality, varied_dynamics


@pytest.fixture(scope="module")
def tiny_runs():
    return tiny_trace_runs(("infaas", "dilaserve", "oracle"))


def test_report_writes_tables_plots_and_summary(tmp_path, tiny_runs):
    out, dyn = tiny_runs
    ctx = EvalContext(EvalOptions(out=tmp_path, settings=("paper",)))
    ctx.__dict__.update(dynamics=dyn, quality=quality())  # artifacts injected, nothing loaded
    text, folder = write(out, ctx)
    for name in (
        "summary.parquet",
        "requests.parquet",
        "threshold_series.parquet",
        "tp_series.parquet",
        "latency_cdf.png",
        "threshold_over_time.png",
        "tp_mix_over_time.png",
        "summary.md",
    ):
        assert (folder / name).stat().st_size > 0, name
    summary = pl.read_parquet(folder / "summary.parquet")
    assert summary["policy"].to_list() == ["infaas", "dilaserve", "oracle"]
    assert "| small | dilaserve |" in text and "quality estimator: replay" in text
    assert "differ from the paper" in text
    pol = policies_json(out)
    assert set(pol) == {"infaas", "dilaserve", "oracle"}
    assert all(set(v) == set(SUMMARY_KEYS) for v in pol.values())
    json.dumps(pol)  # serialisable (NaN mapped to null)


def test_plots_draw_the_runs_numbers(tmp_path, tiny_runs, monkeypatch):
    """Each trace plot shows the tables' data, one line per policy, in a non-blank image."""
    import matplotlib.image

    from dilaserve.eval import plots

    drawn, save = {}, plots._save

    def keep(fig, path):
        drawn[path.name] = {
            line.get_label(): (line.get_xdata(), line.get_ydata()) for ax in fig.axes for line in ax.get_lines()
        }
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    out, dyn = tiny_runs
    ctx = EvalContext(EvalOptions(out=tmp_path, settings=("paper",)))
    ctx.__dict__.update(dynamics=dyn, quality=quality())
    _, folder = write(out, ctx)
    requests = pl.read_parquet(folder / "requests.parquet").filter(pl.col("status") == "finished")
    series = pl.read_parquet(folder / "threshold_series.parquet")
    for policy in ("infaas", "dilaserve", "oracle"):
        x, y = drawn["latency_cdf.png"][policy]
        lat = requests.filter(pl.col("policy") == policy)["latency_s"].sort().to_numpy()
        np.testing.assert_allclose(x, lat)
        assert y[-1] == pytest.approx(1.0) and np.all(np.diff(y) > 0)
        x, y = drawn["threshold_over_time.png"][policy]
        mine = series.filter(pl.col("policy") == policy).sort("time_s")
        np.testing.assert_allclose(x, mine["time_s"].to_numpy())
        np.testing.assert_allclose(y, mine["mean_threshold"].to_numpy())
    assert "SLO" in drawn["latency_cdf.png"]
    assert any(label.startswith("TP-") for label in drawn["tp_mix_over_time.png"])
    for name in drawn:
        image = matplotlib.image.imread(folder / name)
        assert image.shape[0] > 100 and image.shape[1] > 100 and image.std() > 0.01, name


def _artifacts(root):
    """Just enough artifacts for the harness to reach the trace file."""
    varied_dynamics().save(root / "dynamics")
    quality().save(root / "quality" / "threshold_quality.json")
    folder = root / "profiles" / "analytic"
    folder.mkdir(parents=True)
    analytic_profile("llada-8b", "h100", (1, 2, 4)).save(folder / "llada-8b-h100.json")


def test_cli_rejects_a_malformed_trace_and_missing_artifacts(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("time,prompt,output\n1,2,3\n")
    _artifacts(tmp_path)
    assert (
        main(["trace", "--quick", "--trace", str(bad), "--artifacts", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    )
    assert "expected the Azure LLM trace columns" in capsys.readouterr().err
    assert main(["trace", "--quick", "--artifacts", str(tmp_path / "none"), "--out", str(tmp_path / "r")]) == 2
    assert "build it with" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["nonsense"])
    with pytest.raises(SystemExit):
        main(["trace", "--phase-s", "0"])
    assert "--phase-s 0.0 must be positive" in capsys.readouterr().err


def test_phase_s_sets_the_trace_phase_length(tmp_path):
    from dilaserve.eval.workloads import trace_workload

    _artifacts(tmp_path)
    ctx = EvalContext(EvalOptions(settings=("paper",), phase_s=40.0, artifacts=tmp_path))
    wl = trace_workload(ctx, ctx.setting("paper"))
    assert [p.name for p in wl.phases] == ["low", "high"]
    assert [p.end - p.start for p in wl.phases] == pytest.approx([40.0, 40.0])


def test_lengths_and_high_load_shape_the_trace_workload(tmp_path):
    from dilaserve.eval.workloads import trace_workload

    _artifacts(tmp_path)

    def workload(**kw):
        ctx = EvalContext(EvalOptions(settings=("paper",), phase_s=60.0, artifacts=tmp_path, **kw))
        setting = ctx.setting("paper")
        tr = ctx.trace_for(setting)
        cap = ctx.capacity(setting, tr.prompt_tokens, tr.output_tokens)
        return trace_workload(ctx, setting), cap

    base, cap = workload(lengths="trace", high_load=0.8)
    sg, cap_sg = workload(lengths="sharegpt", high_load=1.2)
    # The paper setting's own: ShareGPT as the paper builds it (whole-block answers), high phase at capacity.
    paper, cap_paper = workload()
    assert {r.output_tokens % 32 for r in paper.requests} == {0}
    assert [p.rate for p in paper.phases] == pytest.approx([0.3 * cap_paper, 1.0 * cap_paper])
    # Lengths drawn from ShareGPT's model, not the trace's (P50 prompt 28 vs ~1000 tokens).
    assert np.median([r.prompt_tokens for r in sg.requests]) < 60 < np.median([r.prompt_tokens for r in base.requests])
    # Rates are fractions of the nominal capacity for the lengths used: shorter requests, more of them.
    assert cap_sg > 1.3 * cap
    assert [p.rate for p in base.phases] == pytest.approx([0.3 * cap, 0.8 * cap])
    assert [p.rate for p in sg.phases] == pytest.approx([0.3 * cap_sg, 1.2 * cap_sg])
    high = sum(r.phase == "high" for r in sg.requests) / 60.0
    assert high == pytest.approx(1.2 * cap_sg, rel=0.3)
    # The same arrival process underneath: the low phases' first gaps scale by the rate ratio.
    t_base = np.diff([r.arrival for r in base.requests[:20]])
    t_sg = np.diff([r.arrival for r in sg.requests[:20]])
    np.testing.assert_allclose(t_sg * cap_sg, t_base * cap, rtol=1e-6)


def test_options_are_validated_with_the_fix(capsys):
    with pytest.raises(ValueError, match="--lengths 'alpaca' is unknown: use 'trace'"):
        EvalOptions(lengths="alpaca")
    with pytest.raises(ValueError, match="--high-load -1.0 must be a positive fraction"):
        EvalOptions(high_load=-1.0)
    with pytest.raises(SystemExit):
        main(["trace", "--high-load", "0"])
    assert "--high-load 0.0 must be a positive fraction of nominal capacity" in capsys.readouterr().err


def test_tuner_flags_reach_the_simulated_tuner_and_a_quick_run_keeps_its_interval(capsys):
    _, opts, _, _ = parse(["trace", "--quick", "--tuner-rise-onset", "--tuner-sample", "0.5"])
    tuner = EvalContext(opts).sim_config().tuner
    assert tuner.rise_onset and tuner.sample == 0.5 and (tuner.interval_s, tuner.window_s) == (20.0, 30.0)
    _, plain, _, _ = parse(["trace", "--quick"])
    assert not EvalContext(plain).sim_config().tuner.rise_onset  # off unless asked
    with pytest.raises(SystemExit):
        parse(["trace", "--quick", "--tuner-rise-window-s", "40"])  # longer than a quick run's 30-s window
    assert "rise_window_s=40.0 must lie in (0, window_s=30.0]" in capsys.readouterr().err
    _, narrow, _, _ = parse(["trace", "--quick", "--tuner-interval-s", "10", "--tuner-window-s", "15"])
    assert (narrow.run_tuner.interval_s, narrow.run_tuner.window_s) == (10.0, 15.0)
    _, full, _, _ = parse(["trace"])
    assert (full.run_tuner.interval_s, full.run_tuner.window_s) == (60.0, 60.0)  # the tuner's own
    with pytest.raises(SystemExit):
        parse(["trace", "--quick", "--tuner-window-s", "3"])  # shorter than the 5-s rise window
    assert "rise_window_s=5.0 must lie in (0, window_s=3.0]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["trace", "--quick", "--tuner-interval-s", "0"])  # refused, not the quick default
    assert "interval_s=0.0" in capsys.readouterr().err


def test_control_time_flags_reach_the_simulator_and_are_off_by_default(capsys):
    _, opts, _, _ = parse(
        [
            "trace",
            "--quick",
            "--control-s-per-request",
            "0.001",
            "--tuner-rise-forecast-s",
            "15",
            "--control-burst-s",
            "5",
        ]
    )
    cfg = EvalContext(opts).sim_config()
    assert cfg.control.on and cfg.control.s_per_request == 0.001 and cfg.control.cpu_share == 1.0
    assert cfg.control.burst_s == 5.0
    assert cfg.tuner.rise_forecast_s == 15.0
    _, plain, _, _ = parse(["trace", "--quick"])
    plain_cfg = EvalContext(plain).sim_config()
    assert not plain_cfg.control.on and plain_cfg.tuner.rise_forecast_s is None  # recorded runs do not move
    assert plain_cfg.control.burst_s == 0.0
    with pytest.raises(SystemExit):
        parse(["trace", "--quick", "--control-cpu-share", "2"])
    assert "cpu_share=2.0 must lie in (0, 1]" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["trace", "--quick", "--tuner-rise-forecast-s", "2"])  # shorter than the 5-s rise window
    assert "rise-forecast-s=2.0 must be at least rise_window_s=5.0" in capsys.readouterr().err


def test_runs_that_differ_only_by_name_are_run_once_with_the_same_result(tmp_path):
    ctx = TinyContext(EvalOptions(settings=("paper",), out=tmp_path))
    setting = ctx.setting("paper")
    wl = shape_trace(ctx.trace, [PhaseSpec("low", 4, 3.0), PhaseSpec("high", 4, 9.0)])
    alone = ctx.run_policies(setting, ["fixed@0.9"], wl, 2.0)[0]
    infaas, fixed, fixed7 = ctx.run_policies(setting, ["infaas", "fixed@0.9", "fixed@0.7"], wl, 2.0)
    assert fixed.policy == "fixed@0.9" and fixed.requests.equals(alone.requests)
    assert fixed.requests.equals(infaas.requests) and not fixed7.requests.equals(fixed.requests)


def test_frontier_experiment_on_a_tiny_cluster(tmp_path):
    from dilaserve.eval.experiments import FRONTIER_LOADS, TRACE_POLICIES, frontier

    ctx = TinyContext(EvalOptions(quick=True, settings=("paper",), phase_s=4.0, out=tmp_path))
    out = frontier(ctx)
    loads = FRONTIER_LOADS[True]
    assert [(r.x, r.result.policy) for r in out.runs] == [(x, p) for x in loads for p in TRACE_POLICIES]
    # Each load's high phase runs at that fraction of nominal capacity.
    high = {r.x: next(p.rate for p in r.phases if p.name == "high") for r in out.runs}
    assert high[1.4] / high[0.6] == pytest.approx(1.4 / 0.6)
    text, folder = write(out, ctx)
    for name in ("frontier.png", "goodput_vs_load.png", "summary.parquet", "summary.md"):
        assert (folder / name).stat().st_size > 0, name
    assert "goodput" in text and "best static" in text
    front = extra_json(out)["frontier"]
    assert list(front) == [f"{x:g}" for x in loads] and set(front["1.4"]) == set(TRACE_POLICIES)
    cell = front["0.6"]["fixed@0.5"]
    assert {"slo_attainment", "quality", "goodput", "high_rate"} <= set(cell)
    assert cell["goodput"] <= min(cell["slo_attainment"], cell["quality"]) + 1e-9
    # Lower fixed thresholds: lower quality on the tiny model's table.
    assert front["0.6"]["fixed@0.5"]["quality"] < front["0.6"]["fixed@0.9"]["quality"]
    json.dumps(extra_json(out))
    pol = policies_json(out)  # the compatible section pools every load's requests
    assert set(pol) == set(TRACE_POLICIES)
    assert pol["infaas"]["goodput"] == pytest.approx(
        np.mean([front[f"{x:g}"]["infaas"]["goodput"] for x in loads]), abs=0.2
    )


def test_trace_sweeps_the_high_phase_and_headlines_the_setting_load(tmp_path):
    from dilaserve.eval.experiments import TRACE_LOADS, trace

    ctx = TinyContext(
        EvalOptions(quick=True, settings=("paper",), phase_s=4.0, out=tmp_path, policies=("infaas", "dilaserve"))
    )
    out = trace(ctx)
    assert sorted({r.x for r in out.runs}) == list(TRACE_LOADS)
    head = [r for r in out.runs if r.headline]
    assert {r.x for r in head} == {0.8} and len(head) == 2  # the tiny setting's own load
    text, folder = write(out, ctx)
    for name in ("goodput_vs_load.png", "attainment_vs_load.png", "frontier.png", "latency_cdf.png"):
        assert (folder / name).stat().st_size > 0, name
    sweep = extra_json(out)["load_sweep"]
    assert list(sweep) == [f"{x:g}" for x in TRACE_LOADS]
    pol = policies_json(out)
    assert pol["dilaserve"] == next(r.result.summary.as_json() for r in head if r.result.policy == "dilaserve")
    assert sweep["1.4"]["infaas"]["high_rate"] > sweep["0.8"]["infaas"]["high_rate"]
    # --high-load given: that load alone.
    one = trace(
        TinyContext(
            EvalOptions(quick=True, settings=("paper",), phase_s=4.0, out=tmp_path, policies=("infaas",), high_load=1.2)
        )
    )
    assert [r.x for r in one.runs] == [1.2] and "load_sweep" not in extra_json(one)


def test_trace_at_several_seeds_pools_each_policys_runs_request_by_request(tmp_path, monkeypatch):
    """``trace --seeds``: each policy's row is its runs at every seed pooled, each request
    weighing alike, and ``per_seed`` keeps each run's own numbers. The tiny trace's arrivals
    do not depend on the seed (its step outcomes do), so the pooled goodput is the mean.
    The seeds run in ``--jobs`` processes, each rebuilding the context from the options,
    to the same numbers as one after the other."""
    from dilaserve.eval import experiments
    from dilaserve.eval.experiments import trace

    def run(**seeding):
        opts = EvalOptions(
            quick=True, settings=("paper",), phase_s=4.0, out=tmp_path, policies=("infaas", "dilaserve"), high_load=1.2
        )
        return trace(TinyContext(replace(opts, **seeding)))

    pools = []
    real = experiments.multiprocessing.get_context
    monkeypatch.setattr(experiments.multiprocessing, "get_context", lambda how: pools.append(how) or real(how))
    alone = [{r.result.policy: r.result for r in run(seed=s).runs} for s in (0, 1)]
    assert not pools  # one seed runs here
    pooled = run(seeds=(0, 1))
    assert pools == ["spawn"]  # two seeds, two jobs: side by side
    serial = run(seeds=(0, 1), jobs=1)
    assert pools == ["spawn"] and extra_json(serial) == extra_json(pooled)
    assert [r.result.policy for r in pooled.runs] == ["infaas", "dilaserve"]
    extra = extra_json(pooled)
    assert extra["seeds"] == [0, 1] and any("pools its runs at seeds 0, 1" in n for n in pooled.notes)
    # the seeds' step outcomes move the runs
    assert alone[0]["dilaserve"].summary.mean_latency_s != alone[1]["dilaserve"].summary.mean_latency_s
    for r in pooled.runs:
        name, runs = r.result.policy, [a[r.result.policy] for a in alone]
        assert r.result.requests.height == sum(x.requests.height for x in runs)
        assert r.result.requests["request_id"].n_unique() == r.result.requests.height  # each seed's ids apart
        for key in ("goodput", "slo_attainment", "mean_latency_s"):  # every request finished, in both runs
            assert getattr(r.result.summary, key) == pytest.approx(np.mean([getattr(x.summary, key) for x in runs]))
        assert r.result.events == sum(x.events for x in runs)
        for key in ("goodput", "goodput_high"):
            assert extra["per_seed"]["small"][name][key] == [getattr(x.summary, key) for x in runs]
    assert policies_json(pooled)["dilaserve"] == pooled.runs[1].result.summary.as_json()
    text, folder = write(pooled, TinyContext(EvalOptions(quick=True, settings=("paper",), out=tmp_path)))
    assert (folder / "threshold_over_time.png").stat().st_size > 0


def test_published_setting_and_dynamics_option(tmp_path, capsys):
    from dilaserve.eval.context import SETTINGS

    assert SETTINGS["paper-published"].dynamics == "llada-8b-published"
    assert SETTINGS["paper"].lengths == "sharegpt-paper" and SETTINGS["paper"].high_load == 1.0
    with pytest.raises(ValueError, match="--dynamics 'llada' is unknown"):
        EvalOptions(dynamics="llada")
    _artifacts(tmp_path)  # no published law built there
    assert (
        main(
            [
                "trace",
                "--quick",
                "--settings",
                "paper-published",
                "--artifacts",
                str(tmp_path),
                "--out",
                str(tmp_path / "r"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "laws/llada-8b-published" in err and "+published_step_dynamics" in err
