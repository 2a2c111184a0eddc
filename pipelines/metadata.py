"""Asset metadata as the Dagster UI shows it: numbers rounded for reading, plots as images,
a chart on the asset page itself, paths short enough to leave the copy icon in the table.

Dagster renders a ``MetadataValue.md`` body in place on the asset page only when it is
shorter than :data:`INLINE_MD_LIMIT` characters (its UI's rule); a longer one, any PNG
inlined as a data URI, sits behind a "[Show Markdown]" link that opens a pop-up. So each
plot comes twice: ``chart``, the plot's numbers as a small bar chart in a markdown table,
which the asset page shows at once, and ``plot``, the full PNG one click away.
"""

from __future__ import annotations

import base64
import os
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
    """The PNG at ``path``, shown on the asset page."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    return dg.MetadataValue.md(f"![{alt}](data:image/png;base64,{data})")


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
