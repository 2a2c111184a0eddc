"""Progress reporting into Dagster's run log (visible in the UI and on the command line)."""

from __future__ import annotations

from collections.abc import Callable

import dagster as dg


def progress_logger(context: dg.AssetExecutionContext, what: str, every: float = 0.1) -> Callable[[int, int], None]:
    """``report(done, total)`` that logs about every ``every`` of the way."""
    last = [-1.0]

    def report(done: int, total: int) -> None:
        frac = done / max(total, 1)
        if frac - last[0] >= every or done == total:
            last[0] = frac
            context.log.info(f"{what}: {done}/{total} ({frac:.0%})")

    return report
