"""Results folders that ``python -m dilaserve.eval`` wrote, described for a reader: which
experiment, quick or full, when, on which settings and how many requests.

The evaluation notebook lists them and shows the full run (the one the README reports) when
there is one, else the newest. Any folder holding a ``summary.parquet`` counts, so
experiments added later show up without a change here.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import polars as pl


@dataclass(frozen=True)
class SavedRun:
    """One results folder (``results/<experiment>/``)."""

    folder: Path
    experiment: str
    #: True for ``--quick`` runs; None when the folder's ``summary.md`` does not say.
    quick: bool | None
    written: dt.datetime
    settings: tuple[str, ...]
    policies: tuple[str, ...]
    #: Requests of the largest run in the folder (each policy serves the same workload).
    requests: int
    #: The run's own notes (workload, phases, SLO), as its ``summary.md`` lists them.
    notes: tuple[str, ...]

    @property
    def kind(self) -> str:
        return {True: "quick", False: "full", None: "unknown kind of"}[self.quick]

    @property
    def label(self) -> str:
        return (
            f"{self.experiment}: {self.kind} run of {self.written:%Y-%m-%d %H:%M} UTC, "
            f"{', '.join(self.settings)}, {self.requests:,} requests"
        )


def read_run(folder: Path) -> SavedRun:
    folder = Path(folder)
    summary = pl.read_parquet(folder / "summary.parquet")
    md = (folder / "summary.md").read_text().splitlines() if (folder / "summary.md").exists() else []
    heading = next((line for line in md if line.startswith("## ")), None)
    quick = None if heading is None else heading.rstrip().endswith("(quick)")
    notes = []
    for line in md[1:] if heading else []:
        if line.startswith("|"):
            break  # the table starts: the notes are over
        if line.startswith("- "):
            notes.append(line[2:])
    experiment = str(summary["experiment"][0]) if "experiment" in summary.columns and summary.height else folder.name
    column = lambda name: tuple(summary[name].unique(maintain_order=True).to_list()) if name in summary.columns else ()  # noqa: E731
    requests = int(summary["requests"].max() or 0) if "requests" in summary.columns and summary.height else 0
    written = dt.datetime.fromtimestamp((folder / "summary.parquet").stat().st_mtime, tz=dt.timezone.utc)
    return SavedRun(folder, experiment, quick, written, column("setting"), column("policy"), requests, tuple(notes))


def find_runs(root: Path, depth: int = 2) -> list[SavedRun]:
    """Every results folder under ``root`` (itself and ``depth`` levels down), newest first."""
    root = Path(root)
    found = [root] if (root / "summary.parquet").exists() else []
    level = [root]
    for _ in range(depth):
        level = [d for parent in level if parent.is_dir() for d in sorted(parent.iterdir()) if d.is_dir()]
        found += [d for d in level if (d / "summary.parquet").exists()]
    runs = []
    for folder in found:
        try:
            runs.append(read_run(folder))
        except (OSError, pl.exceptions.PolarsError):
            continue  # a folder being written or a foreign parquet: not a run to show
    return sorted(runs, key=lambda r: r.written, reverse=True)


def preferred(runs: list[SavedRun], experiment: str | None = None) -> SavedRun | None:
    """The run to show first: of ``experiment`` when it has any, a full run (what the README
    reports) before a quick one, the newest among equals."""
    pool = [r for r in runs if r.experiment == experiment] or runs
    if not pool:
        return None
    return min(pool, key=lambda r: (r.quick is not False, -r.written.timestamp()))
