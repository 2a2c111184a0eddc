"""The report's plots, which the evaluation page shows: small multiples in a grid that fits a
page, whole instances on the TP-mix axes, and a legend entry for every mark."""

from __future__ import annotations

import polars as pl
import pytest
from PIL import Image

from dilaserve.eval import plots

PHASES = [("paper", "low", 0.0, 50.0), ("paper", "high", 50.0, 100.0), ("paper", "low", 100.0, 150.0)]


@pytest.fixture
def figures(monkeypatch):
    """Every figure a plot function saves, kept open for inspection."""
    kept = []
    save = plots._save

    def keep(fig, path):
        kept.append(fig)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        return path

    monkeypatch.setattr(plots, "_save", keep)
    yield kept
    monkeypatch.setattr(plots, "_save", save)
    for fig in kept:
        plots.plt.close(fig)


def _tp_series(policies: int) -> pl.DataFrame:
    rows = []
    for k in range(policies):
        for t, n1, n2 in ((0.0, 16, 0), (60.0, 8, 4), (120.0, 16, 0)):
            rows += [("paper", f"policy-{k}", t, 1, n1), ("paper", f"policy-{k}", t, 2, n2)]
    return pl.DataFrame(rows, schema=["setting", "policy", "time_s", "tp", "instances"], orient="row")


def test_ten_tp_mix_panels_are_a_grid_with_whole_instances(tmp_path, figures):
    path = plots.tp_mix_over_time(_tp_series(10), PHASES, {"paper": 150.0}, tmp_path / "tp.png")
    width, height = Image.open(path).size
    assert width <= 2000 and height >= 3 * 300, (width, height)  # rows of four, not a 4950 x 396 strip
    (fig,) = figures
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 10 and len(fig.axes) == 12  # three rows of four, two cells hidden
    for ax in shown:
        assert all(float(t).is_integer() for t in ax.get_yticks()), ax.get_yticks()
        assert "high-load phase" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_the_high_load_band_has_a_legend_entry(tmp_path, figures):
    series = pl.DataFrame(
        [("paper", "dilaserve", t, 0.9 - t / 1000) for t in range(0, 150, 10)],
        schema=["setting", "policy", "time_s", "mean_threshold"],
        orient="row",
    )
    plots.threshold_over_time(series, PHASES, tmp_path / "thr.png")
    (fig,) = figures
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels.count("high-load phase") == 1 and "dilaserve" in labels
