"""The pipeline's plots and asset-page charts read at a glance: plain log-axis labels, charts
short enough for Dagster to show in place, repository paths shown relative to it."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from dilaserve.profile.analytic import analytic_profile  # noqa: E402
from pipelines import plots  # noqa: E402
from pipelines.metadata import INLINE_MD_LIMIT, REPO_ROOT, chart, short_path  # noqa: E402


def test_log_axes_have_plain_labels(tmp_path, monkeypatch):
    kept = []

    def keep(fig, path):
        kept.append(fig)
        fig.savefig(path)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    plots.latency_profile_plot({"a": analytic_profile("llada-8b", "h100", [1, 2])}, tmp_path / "p.png")
    (fig,) = kept
    labels = [
        t.get_text()
        for ax in fig.axes
        for axis in (ax.xaxis, ax.yaxis)
        for t in axis.get_ticklabels(minor=False) + axis.get_ticklabels(minor=True)
        if t.get_text()
    ]
    assert labels and not [t for t in labels if "\\times" in t or "^" in t or "$" in t or "×" in t], labels
    assert plots.plain(40.0) == "40" and plots.plain(0.5) == "0.5" and plots.plain(2000.0) == "2,000"
    plots.plt.close(fig)


def test_charts_fit_the_asset_page():
    rows = [(f"{10 * d + 5}%", [54.0 - d, 88.0 + d]) for d in range(10)]
    md = chart(rows, ["lightgbm", "oneshot"], "progress", unit="%").value
    assert len(md) < INLINE_MD_LIMIT and md.count("\n|") == 11 and "`" in md and "97%" in md
    many = chart([(f"row {i}", [float(i)] * 4) for i in range(60)], ["a", "b", "c", "d"], "label").value
    assert len(many) < INLINE_MD_LIMIT and "every other row" in many


def test_paths_inside_the_repo_are_relative():
    assert short_path(REPO_ROOT / "data" / "artifacts" / "x.png") == "data/artifacts/x.png"
    assert short_path("/elsewhere/x.png") == "/elsewhere/x.png"
