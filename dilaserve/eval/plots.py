"""PNG plots of experiment results (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402

#: Panels per row of a small-multiples figure: four fit a page (about 15 inches at 110 dpi).
MAX_COLUMNS = 4
#: Inches a row of panels may take.
MAX_WIDTH_IN = 22.0


#: Line colours for many policies: tab10 then its light shades (twenty without red, which is
#: dilaserve's), then the same again in other line styles, so that no two of a report's lines
#: look alike.
_PALETTE = [c for i, c in enumerate(plt.get_cmap("tab20").colors) if i not in (6, 7)]
_PALETTE = _PALETTE[::2] + _PALETTE[1::2]
#: Each pass through the palette in another line style: a converged per-tier frontier runs
#: forty and more static points, past what two styles tell apart.
_LINE_STYLES = ("-", "--", "-.", ":")


def line_style(policy: str, index: int = 0) -> dict:
    """dilaserve in red and bold; every other policy a colour of its own (:data:`_PALETTE`)."""
    if policy == "dilaserve":
        return {"color": "tab:red", "lw": 2.2, "zorder": 3}
    style = _LINE_STYLES[(index // len(_PALETTE)) % len(_LINE_STYLES)]
    return {"color": _PALETTE[index % len(_PALETTE)], "ls": style, "lw": 1.2}


def legend_beside(ax) -> None:
    """The legend beside the panel (right of it, inside the figure: tight_layout leaves it
    room), in two columns past fourteen entries: never over the lines it names."""
    n = len(ax.get_legend_handles_labels()[0])
    if n:
        ax.legend(
            fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), ncol=1 if n <= LEGEND_ROWS else 2, frameon=False
        )


def plain_log_axis(axis) -> None:
    """Plain labels on a log axis (0.1, 1, 10; not 10^-1), with 2 and 5 times each power
    labelled when the axis spans less than two decades."""
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}" if v >= 1000 else f"{v:g}"))
    lo, hi = axis.get_view_interval()
    if lo > 0 and hi / lo < 100:
        axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        axis.set_minor_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    else:
        axis.set_minor_formatter(NullFormatter())


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _grid(n: int, width: float, height: float):
    """A figure of ``n`` panels laid out in rows of at most :data:`MAX_COLUMNS` (fewer when
    the panels are wide: not one strip that runs off the page); the unused cells of the last
    row are hidden. Returns the figure and the ``n`` axes in reading order."""
    cols = max(1, min(n, MAX_COLUMNS, int(MAX_WIDTH_IN // width)))
    rows = max(1, -(-n // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _by_setting(frame: pl.DataFrame):
    """One panel per setting, each widened by the legend that sits beside it (one entry per
    policy: a hindsight run has twenty and more)."""
    settings = frame["setting"].unique(maintain_order=True).to_list()
    names = frame["policy"].unique().to_list() if "policy" in frame.columns else []
    fig, axes = _grid(len(settings), 4.5 + _legend_width(names), _legend_height(len(names) + 1))
    return settings, fig, axes


def _legend_width(labels: Sequence[str]) -> float:
    """Inches a :func:`_legend` of ``labels`` takes beside its panel (8 pt text: about 0.065 in
    a character, the line sample and the gaps 0.6 in a column)."""
    if not labels:
        return 0.0
    columns = 1 if len(labels) <= LEGEND_ROWS else 2
    return columns * (0.6 + 0.065 * max(len(str(label)) for label in labels))


def _legend_height(entries: int) -> float:
    """Inches a panel needs for a :func:`legend_beside` of ``entries`` (8 pt rows about 0.17 in
    apart, and the title and axis labels around it): at least 4, more for a converged
    per-tier frontier's forty and more points."""
    columns = 1 if entries <= LEGEND_ROWS else 2
    return max(4.0, 0.17 * -(-entries // columns) + 1.3)


#: Legend entries in one column; more go into two.
LEGEND_ROWS = 14


def attainment_vs(summary: pl.DataFrame, x: str, xlabel: str, path: Path) -> Path:
    """SLO attainment against ``x`` (rate or SLO scale), one line per policy, one panel per setting."""
    return _share_vs(summary, x, "slo_attainment", xlabel, "SLO attainment (%)", path)


def goodput_vs(summary: pl.DataFrame, x: str, xlabel: str, path: Path) -> Path:
    """Goodput (requests in time and correct) against ``x``, one line per policy, one panel per setting."""
    return _share_vs(summary, x, "goodput", xlabel, "goodput (% of requests in time and correct)", path)


def _share_vs(summary: pl.DataFrame, x: str, column: str, xlabel: str, ylabel: str, path: Path) -> Path:
    settings, fig, axes = _by_setting(summary)
    for ax, setting in zip(axes, settings):
        sub = summary.filter(pl.col("setting") == setting).sort(x)
        for i, policy in enumerate(sub["policy"].unique(maintain_order=True)):
            p = sub.filter(pl.col("policy") == policy)
            ax.plot(p[x], 100 * p[column], marker="o", ms=4, label=policy, **line_style(policy, i))
        ax.set(title=setting, xlabel=xlabel, ylabel=ylabel, ylim=(-2, 102))
        ax.grid(alpha=0.3)
        legend_beside(ax)
    return _save(fig, path)


def rate_search(
    probes: dict[str, list[tuple[float, float]]], held: dict[str, float], target: float, ylabel: str, path: Path
) -> Path:
    """A max-rate search: each policy's ``(rate, score)`` probes joined in rate order, the
    ``target`` as a dashed line, and a triangle on it at the rate each policy holds
    (``held``; none where it held no rate tried)."""
    names = list(probes)
    fig, (ax,) = _grid(1, 6.0 + _legend_width(names), _legend_height(len(names) + 1))
    for i, name in enumerate(names):
        style = line_style(name, i)
        pts = sorted(probes[name])
        ax.plot([r for r, _ in pts], [100 * v for _, v in pts], marker="o", ms=4, label=name, **style)
        if held.get(name):
            ax.plot(held[name], 100 * target, marker="v", ms=9, ls="none", color=style["color"], zorder=4)
    ax.axhline(100 * target, color="grey", ls="--", lw=1)
    ax.set(
        title=f"the highest rate each policy holds at {target:.0%}",
        xlabel="rate of the busiest phase (requests/s)",
        ylabel=ylabel,
    )
    ax.grid(alpha=0.3)
    legend_beside(ax)
    return _save(fig, path)


def frontier(summary: pl.DataFrame, line: Sequence[str], adaptive: Sequence[str], path: Path) -> Path:
    """Each (setting, load ``x``) as a row of two panels, sized for a page (about 880 px wide)
    and for as many policies as a hindsight grid runs (twenty and more):

    - SLO attainment against quality: the ``line`` policies (``fixed@TAU``, in threshold
      order) joined as the static frontier, every other static point a small grey dot, the
      ``adaptive`` policies and the best static point (by goodput) marked and named in a
      legend under the panel (up and to the right is better);
    - every policy's goodput as a horizontal bar, sorted, dilaserve and the best static
      point in colour, each bar's value at its end.
    """
    keys = summary.select("setting", "x").unique(maintain_order=True).rows()
    groups = [(setting, x, _rows_at(summary, setting, x)) for setting, x in keys]
    heights = [max(3.6, BAR_IN * len(rows) + 1.4) for _, _, rows in groups]
    fig, axes = plt.subplots(
        len(groups),
        2,
        figsize=(PAGE_IN, sum(heights)),
        squeeze=False,
        gridspec_kw={"width_ratios": [1, 1.15], "height_ratios": heights},
    )
    for (scatter, bars), (setting, x, rows) in zip(axes, groups):
        best = _best_static(rows, adaptive)
        where = setting if np.isnan(x) else f"{setting}, high load {x:g} x capacity"
        _frontier_scatter(scatter, rows, line, adaptive, best, where)
        _goodput_bars(bars, rows, adaptive, best)
    return _save(fig, path)


#: Inches of figure per bar of the goodput chart, and the width of a page (880 px at 110 dpi).
BAR_IN = 0.24
PAGE_IN = 8.0
#: dilaserve and the best static point in every chart; other adaptive policies in turn.
HIGHLIGHT = {"dilaserve": "tab:red", "best static": "tab:green"}
OTHER_ADAPTIVE = ("tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan")


def _rows_at(summary: pl.DataFrame, setting: str, x: float) -> dict[str, dict]:
    at = pl.col("x").is_nan() if np.isnan(x) else pl.col("x") == x
    return {r["policy"]: r for r in summary.filter((pl.col("setting") == setting) & at).iter_rows(named=True)}


def _best_static(rows: dict[str, dict], adaptive: Sequence[str]) -> str | None:
    return best_static({name: r["goodput"] for name, r in rows.items()}, adaptive)


def best_static(values: dict[str, float], adaptive: Sequence[str]) -> str | None:
    """The static policy (not in ``adaptive``) with the largest value; None if there is none."""
    static = {name: v for name, v in values.items() if name not in adaptive and v == v}
    return max(static, key=static.get) if static else None


def _colour(name: str, adaptive: Sequence[str], best: str | None) -> str:
    if name == "dilaserve":
        return HIGHLIGHT["dilaserve"]
    if name == best:
        return HIGHLIGHT["best static"]
    others = [a for a in adaptive if a != "dilaserve"]
    if name in others:
        return OTHER_ADAPTIVE[others.index(name) % len(OTHER_ADAPTIVE)]
    return "lightgray"


def _frontier_scatter(ax, rows, line, adaptive, best, title) -> None:
    fixed = [rows[p] for p in line if p in rows]
    ax.plot(
        [r["quality"] for r in fixed],
        [100 * r["slo_attainment"] for r in fixed],
        "o-",
        color="tab:gray",
        ms=4,
        label="static frontier (threshold)",
    )
    for r in fixed:
        ax.annotate(
            r["policy"].split("@")[-1],
            (r["quality"], 100 * r["slo_attainment"]),
            textcoords="offset points",
            xytext=(4, 3),
            fontsize=8,
            color="tab:gray",
        )
    others = [r for name, r in rows.items() if name not in line and name not in adaptive and name != best]
    if others:
        ax.plot(
            [r["quality"] for r in others],
            [100 * r["slo_attainment"] for r in others],
            ".",
            color="darkgray",
            label="other static points",
        )
    if best is not None:
        r = rows[best]
        ax.plot(
            r["quality"],
            100 * r["slo_attainment"],
            "s",
            color=HIGHLIGHT["best static"],
            ms=9,
            label=f"best static: {best}",
        )
    for name in (a for a in adaptive if a in rows):
        r = rows[name]
        colour = _colour(name, adaptive, best)
        # dilaserve a filled star on top; the other adaptive policies hollow, so that a point
        # they share with dilaserve still shows the star
        style = (
            {"marker": "*", "ms": 15, "color": colour, "zorder": 4, "mec": "black", "mew": 0.5}
            if name == "dilaserve"
            else {"marker": "D", "ms": 9, "mfc": "none", "mec": colour, "mew": 1.8, "zorder": 5, "ls": "none"}
        )
        ax.plot(r["quality"], 100 * r["slo_attainment"], label=name, **style)
    ax.set(title=title, xlabel="quality", ylabel="SLO attainment (%)")
    ax.set_ylim(top=min(102.0, ax.get_ylim()[1]))
    ax.grid(alpha=0.3)
    # Under the panel, never over its points; tight_layout leaves it room inside the figure.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False)


def _goodput_bars(ax, rows, adaptive, best) -> None:
    values = {name: 100 * r["goodput"] for name, r in rows.items()}
    policy_bars(ax, values, adaptive, best, "goodput (%: in time and correct)")
    ax.set_title("goodput, sorted")


def policy_bars(
    ax, values: dict[str, float], adaptive: Sequence[str], best: str | None, xlabel: str, fmt: str = "%.1f"
) -> None:
    """One horizontal bar per policy, sorted (the largest on top), dilaserve and ``best`` in
    colour and bold, each bar's value at its end: readable for twenty and more policies."""
    names = sorted(values, key=lambda n: -np.nan_to_num(values[n], nan=-np.inf))
    ys = np.arange(len(names))
    bars = ax.barh(ys, [values[n] for n in names], color=[_colour(n, adaptive, best) for n in names])
    for bar in bars:
        bar.set(edgecolor="dimgray", lw=0.4)
    ax.bar_label(bars, fmt=fmt, padding=2, fontsize=8)
    ax.set_yticks(ys, names, fontsize=8)
    for tick, name in zip(ax.get_yticklabels(), names):
        if name == "dilaserve" or name == best:
            tick.set_fontweight("bold")
    top = max((v for v in values.values() if v == v), default=1.0)
    ax.set_xlim(0, max(top, 1e-9) * 1.18)  # room for the value labels
    ax.set_ylim(len(names) - 0.5, -0.5)  # the first (largest) on top
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)


def latency_cdf(requests: pl.DataFrame, path: Path) -> Path:
    settings, fig, axes = _by_setting(requests)
    for ax, setting in zip(axes, settings):
        sub = requests.filter((pl.col("setting") == setting) & (pl.col("status") == "finished"))
        for i, policy in enumerate(sub["policy"].unique(maintain_order=True)):
            lat = np.sort(sub.filter(pl.col("policy") == policy)["latency_s"].to_numpy())
            ax.plot(lat, np.arange(1, len(lat) + 1) / max(len(lat), 1), label=policy, **line_style(policy, i))
        slo = sub["deadline_s"] - sub["arrival_s"]
        if slo.len():
            ax.axvline(float(slo.median()), color="k", ls="--", lw=0.8, label="SLO")
        ax.set(title=setting, xlabel="latency (s)", ylabel="CDF", xscale="log")
        plain_log_axis(ax.xaxis)
        ax.grid(alpha=0.3)
        legend_beside(ax)
    return _save(fig, path)


def threshold_over_time(series: pl.DataFrame, phases: Sequence[tuple[str, str, float, float]], path: Path) -> Path:
    """Mean step threshold per time bin; shaded phases (setting, name, start, end)."""
    settings, fig, axes = _by_setting(series)
    for ax, setting in zip(axes, settings):
        sub = series.filter(pl.col("setting") == setting)
        for i, policy in enumerate(sub["policy"].unique(maintain_order=True)):
            p = sub.filter(pl.col("policy") == policy).sort("time_s")
            ax.plot(p["time_s"], p["mean_threshold"], label=policy, **line_style(policy, i))
        _shade(ax, setting, phases)
        ax.set(title=setting, xlabel="time (s)", ylabel="mean step threshold")
        ax.grid(alpha=0.3)
        legend_beside(ax)
    return _save(fig, path)


def tp_mix_over_time(
    tp: pl.DataFrame, phases: Sequence[tuple[str, str, float, float]], end_s: dict, path: Path
) -> Path:
    """Ready instances per TP degree over time (step plot), one panel per (setting, policy)."""
    keys = tp.select("setting", "policy").unique(maintain_order=True).rows()
    fig, axes = _grid(len(keys), 4.5, 3.4)
    for ax, (setting, policy) in zip(axes, keys):
        sub = tp.filter((pl.col("setting") == setting) & (pl.col("policy") == policy))
        times = sorted(set(sub["time_s"].to_list()) | {0.0})
        for d in sorted(sub["tp"].unique().to_list()):
            counts, last = [], 0
            for t in times:
                hit = sub.filter(pl.col("time_s") == t)
                if hit.height:
                    row = hit.filter(pl.col("tp") == d)
                    last = int(row["instances"][0]) if row.height else 0
                counts.append(last)
            ax.step(times + [end_s.get(setting, times[-1])], counts + [counts[-1]], where="post", label=f"TP-{d}")
        _shade(ax, setting, phases)
        ax.set(title=f"{setting} / {policy}", xlabel="time (s)", ylabel="instances")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # whole instances, never 15.75
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def _shade(ax, setting: str, phases) -> None:
    """The high-load phases as a red band, named once in the legend."""
    label = "high-load phase"
    for s, name, start, end in phases:
        if s == setting and name == "high":
            ax.axvspan(start, end, color="tab:red", alpha=0.08, lw=0, label=label)
            label = None
