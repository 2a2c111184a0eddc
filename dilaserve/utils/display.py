"""Numbers as a person reads them: rounded to a few significant digits, and tables without
columns that hold nothing (the notebooks, the serving app and the pipeline's asset metadata)."""

from __future__ import annotations

import math
from typing import Any

#: Significant digits shown for a measured number (1.211, 0.0001235, 3542).
DIGITS = 4
#: Magnitudes below this are floating-point noise (an ILP's 1.5e-12 steps on TP-2) and show as 0.
NOISE = 1e-9


def rounded(value: Any, digits: int = DIGITS) -> Any:
    """``value`` rounded to ``digits`` significant digits; integers, whole floats (as int),
    NaN and non-numbers are returned as they are (NaN as None, which tables show blank)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value) or value.is_integer():
            return int(value) if value.is_integer() else value
        if abs(value) < NOISE:
            return 0  # a solver's or a subtraction's round-off, not a measured quantity
        return float(f"{value:.{digits}g}")
    return value


def rounded_rows(rows: list[dict], digits: int = DIGITS) -> list[dict]:
    """Each row's numbers rounded; a column that is empty (None or NaN) in every row is dropped."""
    empty = {k for k in (rows[0] if rows else {}) if all(rounded(r.get(k)) is None for r in rows)}
    return [{k: rounded(v, digits) for k, v in r.items() if k not in empty} for r in rows]


def rounded_frame(frame, digits: int = DIGITS):
    """A polars DataFrame with its float columns rounded (noise to 0) and its all-null / all-NaN
    columns dropped."""
    import polars as pl

    floats = [c for c, t in frame.schema.items() if t in (pl.Float32, pl.Float64)]
    empty = [
        c
        for c in frame.columns
        if frame[c].null_count() == frame.height or (c in floats and frame[c].is_nan().fill_null(True).all())
    ]
    return frame.drop(empty).with_columns(
        pl.when(pl.col(c).abs() < NOISE).then(0.0).otherwise(pl.col(c).round_sig_figs(digits)).alias(c)
        for c in floats
        if c not in empty
    )
