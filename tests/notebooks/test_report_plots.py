"""The report's plots, which the evaluation page shows: small multiples in a grid that fits a
page, whole instances on the TP-mix axes, and a legend entry for every mark."""

from __future__ import annotations

import polars as pl
import pytest
from matplotlib.colors import to_rgba
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


# ---------------------------------------------------------------- a hindsight run's many policies
def _overlaps(boxes) -> list[tuple[int, int]]:
    return [(i, j) for i, a in enumerate(boxes) for j, b in enumerate(boxes) if i < j and a.overlaps(b)]


def _shown_tick_labels(axis) -> list:
    """The tick labels drawn: visible, with text, at a tick inside the axis's view."""
    lo, hi = sorted(axis.get_view_interval())
    ticks = axis.get_major_ticks() + axis.get_minor_ticks()
    return [t.label1 for t in ticks if t.label1.get_visible() and t.label1.get_text() and lo <= t.get_loc() <= hi]


def layout_problems(fig) -> list[str]:
    """What a reader would trip over, from matplotlib's own tight bounding boxes: tick labels
    that overlap on an axis, a legend or any text (titles, axis labels, tick and value labels)
    that runs off the figure, text under 8 pt."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox.padded(1)

    def off_page(box) -> bool:
        return not (page.contains(box.x0, box.y0) and page.contains(box.x1, box.y1))

    problems = []
    for n, ax in enumerate(a for a in fig.axes if a.get_visible()):
        texts = [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            labels = _shown_tick_labels(axis)
            texts += labels
            boxes = [t.get_window_extent(renderer) for t in labels]
            problems += [
                f"axes {n}: {name} tick labels {labels[i].get_text()!r} and {labels[j].get_text()!r} overlap"
                for i, j in _overlaps(boxes)
            ]
        legend = ax.get_legend()
        if legend is not None:
            texts += legend.get_texts()
            if off_page(legend.get_window_extent(renderer)):
                problems.append(f"axes {n}: legend outside the figure {fig.bbox}")
        for text in texts:
            if not (text.get_visible() and text.get_text()):
                continue
            if text.get_fontsize() < 8:
                problems.append(f"axes {n}: {text.get_text()!r} at {text.get_fontsize()} pt")
            if off_page(text.get_window_extent(renderer)):
                problems.append(f"axes {n}: {text.get_text()!r} runs off the figure")
    return problems


def recorded_hindsight_summary(min_policies: int = 21) -> pl.DataFrame:
    """The summary of a recorded ``frontier --hindsight`` run (docs/results/): its policies'
    attainment, quality and goodput, as the report's summary frame holds them."""
    import json
    from pathlib import Path

    results = Path(__file__).resolve().parents[2] / "docs" / "results"
    for path in sorted(results.glob("*.json")):
        record = json.loads(path.read_text())
        policies = record["output"].get("policies", {})
        if "--hindsight" in record.get("command", "") and len(policies) >= min_policies:
            return pl.DataFrame(
                [{"setting": "paper", "x": float("nan"), "policy": p, **m} for p, m in policies.items()],
                infer_schema_length=None,
            )
    pytest.skip(f"no recorded hindsight run with {min_policies} policies under docs/results/")


def test_a_hindsight_runs_frontier_is_readable(tmp_path, figures):
    from dilaserve.eval.report import adaptive_in
    from dilaserve.schedule.policies import FIXED_POLICIES

    summary = recorded_hindsight_summary()
    path = plots.frontier(summary, FIXED_POLICIES, adaptive_in(summary), tmp_path / "frontier.png")
    (fig,) = figures
    assert layout_problems(fig) == []
    # A page's width: the evaluation page shows it at its own size, not shrunk to 900 px.
    assert Image.open(path).size[0] <= 900
    scatter, bars = fig.axes
    names = [t.get_text() for t in bars.get_yticklabels()]
    assert len(names) == summary.height
    goodput = dict(zip(summary["policy"], summary["goodput"]))
    assert [goodput[n] for n in names] == sorted(goodput.values(), reverse=True)  # sorted, the best on top
    colours = {n: p.get_facecolor() for n, p in zip(names, bars.patches)}
    best = max((p for p in names if p not in adaptive_in(summary)), key=goodput.get)
    assert colours["dilaserve"] == to_rgba("tab:red") and colours[best] == to_rgba("tab:green")
    legend = [t.get_text() for t in scatter.get_legend().get_texts()]
    assert "dilaserve" in legend and f"best static: {best}" in legend


def test_many_policies_get_their_own_colours_and_a_legend_beside_the_lines(tmp_path, figures):
    summary = recorded_hindsight_summary()
    swept = pl.concat([summary.with_columns(x=pl.lit(x)) for x in (0.8, 1.0, 1.2)])
    plots.goodput_vs(swept, "x", "load", tmp_path / "goodput.png")
    rows = [("paper", p, "finished", lat, 0.0, 2.0) for p in summary["policy"] for lat in (0.05, 0.3, 1.0, 4.0)]
    requests = pl.DataFrame(
        rows, schema=["setting", "policy", "status", "latency_s", "arrival_s", "deadline_s"], orient="row"
    )
    plots.latency_cdf(requests, tmp_path / "cdf.png")
    for fig in figures:
        assert layout_problems(fig) == []
        (ax,) = [a for a in fig.axes if a.get_visible()]
        lines = [line for line in ax.get_lines() if not line.get_label().startswith("_") and line.get_label() != "SLO"]
        styles = {(to_rgba(line.get_color()), line.get_linestyle()) for line in lines}
        assert len(lines) == summary.height and len(styles) == len(lines)
        # The legend sits right of the panel, not over its lines.
        renderer = fig.canvas.get_renderer()
        assert ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
    labels = [t.get_text() for t in figures[1].axes[0].xaxis.get_ticklabels(which="both") if t.get_text()]
    assert labels and not [t for t in labels if "$" in t or "^" in t], labels
