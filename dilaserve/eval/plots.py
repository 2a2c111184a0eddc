"""PNG plots of experiment results (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

#: Panels per row of a small-multiples figure: four fit a page (about 15 inches at 110 dpi).
MAX_COLUMNS = 4


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _grid(n: int, width: float, height: float):
    """A figure of ``n`` panels laid out in rows of at most :data:`MAX_COLUMNS` (not one strip
    that runs off the page); the unused cells of the last row are hidden. Returns the figure
    and the ``n`` axes in reading order."""
    cols = max(1, min(n, MAX_COLUMNS))
    rows = max(1, -(-n // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _by_setting(frame: pl.DataFrame):
    settings = frame["setting"].unique(maintain_order=True).to_list()
    fig, axes = _grid(len(settings), 5.5, 4)
    return settings, fig, axes


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
        for policy in sub["policy"].unique(maintain_order=True):
            p = sub.filter(pl.col("policy") == policy)
            ax.plot(p[x], 100 * p[column], marker="o", label=policy)
        ax.set(title=setting, xlabel=xlabel, ylabel=ylabel, ylim=(-2, 102))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def frontier(summary: pl.DataFrame, line: Sequence[str], static: Sequence[str], path: Path) -> Path:
    """SLO attainment against quality, one panel per (setting, load ``x``): the ``line``
    policies (``fixed@TAU``, in threshold order) joined as the static frontier, the other
    ``static`` ones as open squares, every other policy as its own marker (up and to the
    right is better: an adaptive policy pays its way above the line)."""
    keys = summary.select("setting", "x").unique(maintain_order=True).rows()
    fig, axes = _grid(len(keys), 4.8, 4.2)
    adaptive = [p for p in summary["policy"].unique(maintain_order=True) if p not in static]
    markers = dict(zip(adaptive, "*DP^vX<>h"))
    for ax, (setting, x) in zip(axes, keys):
        at = pl.col("x").is_nan() if np.isnan(x) else pl.col("x") == x
        rows = {r["policy"]: r for r in summary.filter((pl.col("setting") == setting) & at).iter_rows(named=True)}
        fixed = [rows[p] for p in line if p in rows]
        ax.plot(
            [r["quality"] for r in fixed],
            [100 * r["slo_attainment"] for r in fixed],
            "o-",
            color="tab:gray",
            label="static frontier",
        )
        for r in fixed:
            ax.annotate(
                r["policy"].split("@")[-1],
                (r["quality"], 100 * r["slo_attainment"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
                color="tab:gray",
            )
        for name, r in rows.items():
            if name in static and name not in line:
                ax.plot(r["quality"], 100 * r["slo_attainment"], "s", mfc="none", ms=9, label=name)
            elif name in markers:
                ax.plot(r["quality"], 100 * r["slo_attainment"], markers[name], ms=11, label=name)
        title = setting if np.isnan(x) else f"{setting}, high load {x:g} x capacity"
        ax.set(title=title, xlabel="quality", ylabel="SLO attainment (%)", ylim=(-2, 102))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def latency_cdf(requests: pl.DataFrame, path: Path) -> Path:
    settings, fig, axes = _by_setting(requests)
    for ax, setting in zip(axes, settings):
        sub = requests.filter((pl.col("setting") == setting) & (pl.col("status") == "finished"))
        for policy in sub["policy"].unique(maintain_order=True):
            lat = np.sort(sub.filter(pl.col("policy") == policy)["latency_s"].to_numpy())
            ax.plot(lat, np.arange(1, len(lat) + 1) / max(len(lat), 1), label=policy)
        slo = sub["deadline_s"] - sub["arrival_s"]
        if slo.len():
            ax.axvline(float(slo.median()), color="k", ls="--", lw=0.8, label="SLO")
        ax.set(title=setting, xlabel="latency (s)", ylabel="CDF", xscale="log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def threshold_over_time(series: pl.DataFrame, phases: Sequence[tuple[str, str, float, float]], path: Path) -> Path:
    """Mean step threshold per time bin; shaded phases (setting, name, start, end)."""
    settings, fig, axes = _by_setting(series)
    for ax, setting in zip(axes, settings):
        sub = series.filter(pl.col("setting") == setting)
        for policy in sub["policy"].unique(maintain_order=True):
            p = sub.filter(pl.col("policy") == policy).sort("time_s")
            ax.plot(p["time_s"], p["mean_threshold"], label=policy)
        _shade(ax, setting, phases)
        ax.set(title=setting, xlabel="time (s)", ylabel="mean step threshold")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
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
