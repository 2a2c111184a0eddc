"""The eval harness: tables, plots, the JSON line, and clean failures."""
import json

import polars as pl
import pytest

from dilaserve.eval.__main__ import main
from dilaserve.eval.context import EvalContext, EvalOptions
from dilaserve.eval.report import policies_json, write
from dilaserve.profile.analytic import analytic_profile
from dilaserve.sim.metrics import SUMMARY_KEYS
from tests.eval.builders import tiny_trace_runs
from tests.sim.builders import quality, varied_dynamics


@pytest.fixture(scope="module")
def tiny_runs():
    return tiny_trace_runs(("infaas", "dilaserve", "oracle"))


def test_report_writes_tables_plots_and_summary(tmp_path, tiny_runs):
    out, dyn = tiny_runs
    ctx = EvalContext(EvalOptions(out=tmp_path, settings=("paper",)))
    ctx.__dict__.update(dynamics=dyn, quality=quality())  # artifacts injected, nothing loaded
    text, folder = write(out, ctx)
    for name in ("summary.parquet", "requests.parquet", "threshold_series.parquet", "tp_series.parquet",
                 "latency_cdf.png", "threshold_over_time.png", "tp_mix_over_time.png", "summary.md"):
        assert (folder / name).stat().st_size > 0, name
    summary = pl.read_parquet(folder / "summary.parquet")
    assert summary["policy"].to_list() == ["infaas", "dilaserve", "oracle"]
    assert "| small | dilaserve |" in text and "quality estimator: replay" in text
    assert "differ from the paper" in text
    pol = policies_json(out)
    assert set(pol) == {"infaas", "dilaserve", "oracle"}
    assert all(set(v) == set(SUMMARY_KEYS) for v in pol.values())
    json.dumps(pol)  # serialisable (NaN mapped to null)


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
    assert main(["trace", "--quick", "--trace", str(bad), "--artifacts", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "expected the Azure LLM trace columns" in capsys.readouterr().err
    assert main(["trace", "--quick", "--artifacts", str(tmp_path / "none"), "--out", str(tmp_path / "r")]) == 2
    assert "build it with" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["nonsense"])
    with pytest.raises(SystemExit):
        main(["trace", "--phase-s", "0"])
    assert "--phase-s 0.0 must be positive" in capsys.readouterr().err


def test_phase_s_sets_the_trace_phase_length(tmp_path):
    from dilaserve.eval.experiments import trace_workload

    _artifacts(tmp_path)
    ctx = EvalContext(EvalOptions(settings=("paper",), phase_s=40.0, artifacts=tmp_path))
    wl = trace_workload(ctx, ctx.setting("paper"))
    assert [p.name for p in wl.phases] == ["low", "high"]
    assert [p.end - p.start for p in wl.phases] == pytest.approx([40.0, 40.0])
