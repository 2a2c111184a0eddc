"""Trace files: the Azure LLM inference trace format and BurstGPT, read by column name.

Both loaders return a :class:`Trace` (arrival seconds from the first request, prompt and
output tokens). A malformed file raises :class:`TraceFormatError` saying what is wrong and
what the file should look like.

* Azure (``TIMESTAMP, ContextTokens, GeneratedTokens``): ``TIMESTAMP`` is a date-time
  (``2023-11-16 18:15:46.6805900``) or seconds.
* BurstGPT (``Timestamp, Model, Request tokens, Response tokens, Total tokens, Log Type``;
  v3 files add ``Session ID, Elapsed time``): ``Timestamp`` is seconds. Rows with zero
  response tokens are failed requests in BurstGPT's log and are dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

log = logging.getLogger(__name__)

#: The conversation trace shipped with the repo (see data/README.md for its licence).
AZURE_CONV = Path(__file__).resolve().parents[2] / "data" / "traces" / "azure_llm_2023_conv.csv"

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


class TraceFormatError(ValueError):
    """A trace file that cannot be read as a request trace."""


@dataclass(frozen=True)
class Trace:
    source: str
    arrival_s: np.ndarray  # sorted, first request at 0
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1]) if len(self) else 0.0

    @property
    def mean_rate(self) -> float:
        return len(self) / self.duration_s if self.duration_s > 0 else float("nan")


def _read_csv(path: Path) -> pl.DataFrame:
    if not path.is_file():
        raise TraceFormatError(f"trace file {path} does not exist: pass the path of a CSV trace")
    try:
        frame = pl.read_csv(path, infer_schema_length=10_000)
    except (pl.exceptions.PolarsError, UnicodeDecodeError) as e:
        raise TraceFormatError(f"trace file {path} is not a readable CSV ({type(e).__name__}: {e})") from None
    if frame.height == 0:
        raise TraceFormatError(f"trace file {path} has a header but no requests")
    return frame


def _format_of(columns: list[str], path: Path) -> str:
    if all(c in columns for c in AZURE_COLUMNS):
        return "azure"
    if all(c in columns for c in BURSTGPT_COLUMNS):
        return "burstgpt"
    raise TraceFormatError(
        f"trace file {path} has columns {columns}: expected the Azure LLM trace columns "
        f"{list(AZURE_COLUMNS)} or the BurstGPT columns {list(BURSTGPT_COLUMNS)} (plus any others)"
    )


def _tokens(frame: pl.DataFrame, column: str, path: Path) -> np.ndarray:
    col = frame[column]
    if col.null_count():
        raise TraceFormatError(
            f"trace file {path}: column {column!r} has {col.null_count()} empty value(s); "
            "every request needs a token count"
        )
    if not col.dtype.is_numeric():
        bad = col.cast(pl.Float64, strict=False)
        first = col.filter(bad.is_null()).head(1).to_list()
        raise TraceFormatError(f"trace file {path}: column {column!r} must hold token counts, found {first[0]!r}")
    values = col.to_numpy().astype(np.float64)
    if (values < 0).any() or not np.isfinite(values).all():
        raise TraceFormatError(f"trace file {path}: column {column!r} has negative or non-finite token counts")
    return values.round().astype(np.int64)


def _seconds(frame: pl.DataFrame, column: str, path: Path) -> np.ndarray:
    col = frame[column]
    if col.null_count():
        raise TraceFormatError(f"trace file {path}: column {column!r} has {col.null_count()} empty timestamp(s)")
    if col.dtype.is_numeric():
        t = col.to_numpy().astype(np.float64)
    else:
        try:
            parsed = col.cast(pl.Utf8).str.to_datetime(strict=False, time_unit="us")
            bad = col.filter(parsed.is_null()).head(1).to_list()
        except pl.exceptions.PolarsError:  # no value fits any date-time format
            bad = col.head(1).to_list()
        if bad:
            first = bad[0]
            raise TraceFormatError(
                f"trace file {path}: cannot read timestamp {first!r} in column {column!r}; use "
                "'YYYY-MM-DD HH:MM:SS.ffffff' or seconds"
            )
        t = parsed.dt.epoch("us").to_numpy().astype(np.float64) / 1e6
    if not np.isfinite(t).all():
        raise TraceFormatError(f"trace file {path}: column {column!r} has non-finite timestamps")
    return t


def load_trace(path: str | Path = AZURE_CONV) -> Trace:
    """Read an Azure-format or BurstGPT CSV (detected from its columns)."""
    path = Path(path)
    frame = _read_csv(path)
    fmt = _format_of(frame.columns, path)
    time_col, prompt_col, output_col = AZURE_COLUMNS if fmt == "azure" else BURSTGPT_COLUMNS
    t = _seconds(frame, time_col, path)
    prompt = _tokens(frame, prompt_col, path)
    output = _tokens(frame, output_col, path)
    keep = output > 0
    if not keep.all():
        log.info("trace %s: dropping %d request(s) with no output tokens (failed requests)", path, int((~keep).sum()))
        t, prompt, output = t[keep], prompt[keep], output[keep]
    if len(t) < 2:
        raise TraceFormatError(f"trace file {path} has {len(t)} usable request(s): a trace needs at least 2")
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    if t[-1] <= 0:
        raise TraceFormatError(f"trace file {path}: every request has the same timestamp; a trace needs a time span")
    return Trace(f"{fmt}:{path.name}", t, np.maximum(prompt[order], 1), output[order])
