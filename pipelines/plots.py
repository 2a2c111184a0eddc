"""PNG plots written next to the artifacts (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import math  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from dilaserve.engine.state import StepKind  # noqa: E402
from dilaserve.profile.types import LatencyProfile  # noqa: E402

#: Inches of width a plot may take: at 110 dpi it fits the value column of Dagster's asset
#: page (about 720 px in a 1400 px window) without sideways scrolling.
PAGE_WIDTH_IN = 6.5


def predictor_error_plot(by_decile: pl.DataFrame, by_threshold: pl.DataFrame, path: Path) -> Path:
    """Relative error (%) by progress decile above relative error by threshold, one line or
    bar per predictor."""
    fig, (a, b) = plt.subplots(2, 1, figsize=(PAGE_WIDTH_IN, 6.4))
    names = by_decile["predictor"].unique(maintain_order=True).to_list()
    for name in names:
        d = by_decile.filter(pl.col("predictor") == name)
        a.plot(d["decile"] * 10 + 5, 100 * d["rel_err"], marker="o", label=name)
    a.set(
        xlabel="progress through the request's steps (%)", ylabel="mean relative error (%)", title="by progress decile"
    )
    thr = sorted(by_threshold["threshold"].unique().to_list())
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        d = by_threshold.filter(pl.col("predictor") == name).sort("threshold")
        b.bar([k + i * width for k in range(len(thr))], 100 * d["rel_err"], width, label=name)
    b.set_xticks([k + width * (len(names) - 1) / 2 for k in range(len(thr))], [f"{t:g}" for t in thr])
    b.set(xlabel="threshold", ylabel="mean relative error (%)", title="by threshold")
    for ax in (a, b):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    # beside the panel, not over its lines
    a.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _save(fig, path)


def latency_profile_plot(profiles: Mapping[str, LatencyProfile], path: Path) -> Path:
    """Step latency vs tokens: one row per profile, its recompute steps beside its cache
    steps, one line per TP degree (a page wide, however many profiles)."""
    fig, axes = plt.subplots(len(profiles), 2, figsize=(PAGE_WIDTH_IN, 2.9 * len(profiles) + 0.3), squeeze=False)
    for row, (name, prof) in enumerate(profiles.items()):
        for col, kind in enumerate((StepKind.RECOMPUTE, StepKind.CACHE)):
            ax = axes[row][col]
            for tp in prof.tp_degrees:
                c = prof.curve(tp, kind)
                ax.plot(c.tokens, [s * 1e3 for s in c.latency_s], marker=".", label=f"TP-{tp}")
            ax.set(xscale="log", yscale="log", title=f"{name}: {kind.value}", xlabel="tokens in batch")
            plain_log_ticks(ax)
            if col == 0:
                ax.set_ylabel("step latency (ms)")
            ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=8)
    return _save(fig, path)


def plain(value: float, _pos=None) -> str:
    """A tick label as a person writes it: 40, 0.5, 2,000 (not 4x10^1)."""
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}"


def plain_log_ticks(ax) -> None:
    """Plain labels on both log axes: at each power of ten, and at 2 and 5 times it when the
    axis spans less than two decades (else the minor ticks stay unlabelled)."""
    ax.figure.canvas.draw()  # the limits are final only once drawn
    for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        axis.set_major_formatter(FuncFormatter(plain))
        if lo > 0 and math.log10(hi / lo) < 2:
            axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
            axis.set_minor_formatter(FuncFormatter(plain))
        else:
            axis.set_minor_formatter(NullFormatter())


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
