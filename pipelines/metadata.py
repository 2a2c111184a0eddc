"""Asset metadata as the Dagster UI shows it: numbers rounded for reading, plots as images.

Dagster renders a ``MetadataValue.md`` body on the asset page, and a PNG inlined there as a
data URI shows as the picture itself rather than a path into someone else's file system.
"""

from __future__ import annotations

import base64
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
