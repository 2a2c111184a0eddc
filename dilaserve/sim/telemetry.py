"""What a simulated cluster did over time: thresholds of the steps it ran, TP mix, busy time."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

import polars as pl

from dilaserve.cluster.base import StepAssignment


class Telemetry:
    """Aggregates per time bin so memory stays flat however long the run."""

    def __init__(self, bin_s: float = 60.0):
        if bin_s <= 0:
            raise ValueError(f"telemetry bin_s={bin_s} must be positive seconds")
        self.bin_s = bin_s
        self._thr_sum: dict[int, float] = defaultdict(float)
        self._thr_n: dict[int, int] = defaultdict(int)
        self._busy: dict[int, float] = defaultdict(float)
        self._ready: dict[str, int] = {}
        self.tp_changes: list[tuple[float, dict[int, int]]] = [(0.0, {})]
        self.steps = 0
        self.request_steps = 0

    def on_step(self, now: float, latency: float, batch: Sequence[StepAssignment]) -> None:
        b = int(now // self.bin_s)
        self._thr_sum[b] += sum(a.threshold for a in batch)
        self._thr_n[b] += len(batch)
        self._busy[b] += latency
        self.steps += 1
        self.request_steps += len(batch)

    def on_ready(self, now: float, instance_id: str, tp: int) -> None:
        self._ready[instance_id] = tp
        self._record_mix(now)

    def on_stopped(self, now: float, instance_id: str) -> None:
        self._ready.pop(instance_id, None)
        self._record_mix(now)

    def _record_mix(self, now: float) -> None:
        mix = dict(sorted(Counter(self._ready.values()).items()))
        if self.tp_changes and self.tp_changes[-1][0] == now:
            self.tp_changes[-1] = (now, mix)
        else:
            self.tp_changes.append((now, mix))

    # ------------------------------------------------------------ frames
    def threshold_series(self) -> pl.DataFrame:
        """Mean threshold of the request-steps run in each bin, and instance-busy seconds."""
        bins = sorted(self._thr_n)
        return pl.DataFrame(
            {
                "time_s": [b * self.bin_s for b in bins],
                "mean_threshold": [self._thr_sum[b] / self._thr_n[b] for b in bins],
                "request_steps": [self._thr_n[b] for b in bins],
                "busy_s": [self._busy[b] for b in bins],
            },
            schema={
                "time_s": pl.Float64,
                "mean_threshold": pl.Float64,
                "request_steps": pl.Int64,
                "busy_s": pl.Float64,
            },
        )

    def tp_series(self) -> pl.DataFrame:
        """Ready instances per TP degree after every change (long format)."""
        rows = [(t, tp, n) for t, mix in self.tp_changes for tp, n in mix.items()]
        return pl.DataFrame(rows, schema={"time_s": pl.Float64, "tp": pl.Int64, "instances": pl.Int64}, orient="row")
