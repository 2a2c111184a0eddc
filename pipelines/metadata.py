"""Asset metadata as the Dagster UI shows it: numbers rounded for reading, plots in place on
the asset page, a chart of the plot's numbers beside them, paths short enough to leave the
copy icon in the table.

Dagster's asset page renders a ``MetadataValue.md`` body in place only when it is shorter
than :data:`INLINE_MD_LIMIT` characters (its UI's rule, ``MetadataEntry.tsx``); anything
longer, a PNG inlined as a data URI included, sits behind a "[Show Markdown]" link that opens
a pop-up. So :func:`plot` keeps the markdown short: it copies the PNG into the instance's
compute-log folder, which the Dagster webserver serves at ``/logs/<folder>/<name>/png``, and
links the image from there. An instance without a local compute-log folder (an ephemeral one,
in tests) gets the PNG as a data URI, one click away.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg

from dilaserve.utils.display import rounded


def _round_tree(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _round_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_round_tree(v) for v in value]
    return rounded(value)


def image(path: Path, alt: str = "plot") -> dg.MetadataValue:
    """The PNG at ``path`` as a data URI: the asset page shows it behind a link (too long to
    show in place)."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return dg.MetadataValue.md(f"![{alt}](data:image/png;base64,{data})")


#: The compute-log subfolder the plots are copied to (the webserver serves it under ``/logs/``).
PLOT_FOLDER = "dilaserve-plots"


def plot(instance: dg.DagsterInstance, path: Path, alt: str = "plot") -> dg.MetadataValue:
    """The PNG at ``path``, shown in place on the asset page of ``instance``'s webserver: a
    copy under the instance's compute-log folder, named by its content (a new plot is a new
    address, never a stale cached image), linked in markdown short enough to render inline.
    Falls back to :func:`image` when the instance keeps no local compute logs."""
    local = getattr(instance.compute_log_manager, "get_captured_local_path", None)
    if local is None:
        return image(path, alt)
    data = Path(path).read_bytes()
    name = f"{Path(path).stem}-{hashlib.sha256(data).hexdigest()[:12]}"
    target = Path(local([PLOT_FOLDER, name], "png"))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)
    return dg.MetadataValue.md(f"![{alt}](/logs/{PLOT_FOLDER}/{name}/png)")


#: Below this many characters Dagster's asset page shows a markdown value in place.
INLINE_MD_LIMIT = 1000
REPO_ROOT = Path(__file__).resolve().parents[1]
_BAR = "\u2588"


def chart(
    rows: Sequence[tuple[str, Sequence[float]]], columns: Sequence[str], first: str, unit: str = "", width: int = 10
) -> dg.MetadataValue:
    """A bar chart as a markdown table that the asset page shows in place: one row per
    label, one column per series, each cell a bar scaled to the table's largest value and
    the value itself. Rows are thinned (every other one) until it fits :data:`INLINE_MD_LIMIT`."""
    rows = list(rows)
    top = max((v for _, vals in rows for v in vals if v == v), default=0.0) or 1.0

    def cell(v: float) -> str:
        if v != v:  # NaN
            return "-"
        return f"`{_BAR * max(1, round(width * v / top)):<{width}}` {rounded(v, 3):g}{unit}"

    def table(rs) -> str:
        head = f"| {first} | " + " | ".join(columns) + " |\n|" + "---|" * (len(columns) + 1)
        return head + "".join(f"\n| {label} | " + " | ".join(cell(v) for v in vals) + " |" for label, vals in rs)

    body = table(rows)
    while len(body) >= INLINE_MD_LIMIT and len(rows) > 2:
        rows = rows[::2]
        body = table(rows) + "\n\n(every other row)"
    return dg.MetadataValue.md(body)


def short_path(path: Path | str) -> str:
    """``path`` relative to the repository when it lies inside it (``data/artifacts/...``):
    an absolute path pushes the metadata table's copy icon out of sight."""
    p = Path(os.path.abspath(path))  # not resolved: data/artifacts may be a link to another checkout
    try:
        return str(p.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def tidy(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` with every float rounded (in JSON trees too) and dicts or lists as JSON."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, dg.JsonMetadataValue):
            value = dg.MetadataValue.json(_round_tree(value.data))
        elif isinstance(value, (dict, list)):
            value = dg.MetadataValue.json(_round_tree(value))
        elif isinstance(value, float):
            value = rounded(value)
        out[key] = value
    return out
