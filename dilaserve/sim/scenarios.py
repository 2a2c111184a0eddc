"""Named workloads: a rate curve taken from a real trace, SLO tiers and phase lengths chosen
together so that one trade-off exists (docs/architecture.md, "Workloads where the TP mix
must change").

* :func:`trace_rate_curve`: the trace's own arrival rate per window, the diurnal shape of
  its hour (the shipped conversation trace rises from about 4.7 to 7.5 requests/s and falls
  back).
* :func:`diurnal_phases`: that curve stretched onto ``[low, high]`` fractions of nominal
  capacity, one load phase per window; within a phase the trace keeps its own bursts
  (:func:`~dilaserve.sim.arrivals.shape_trace`).
* :data:`NAMED_WORKLOADS`: each named workload's tiers, curve and phase lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dilaserve.sim.arrivals import PhaseSpec
from dilaserve.sim.slo import parse_slo_tiers
from dilaserve.sim.traces import Trace


def trace_rate_curve(trace: Trace, windows: int) -> np.ndarray:
    """The trace's mean arrival rate (requests/s) in each of ``windows`` equal stretches of
    its time span."""
    if windows < 1:
        raise ValueError(f"windows={windows} must be at least 1 (stretches of the trace's time span)")
    edges = np.linspace(0.0, trace.duration_s, windows + 1)
    edges[-1] = np.nextafter(edges[-1], np.inf)  # the last arrival falls in the last window
    counts = np.histogram(trace.arrival_s, bins=edges)[0]
    return counts / np.diff(edges)


def diurnal_phases(
    trace: Trace, windows: int, low: float, high: float, capacity_rps: float, phase_s: float
) -> list[PhaseSpec]:
    """One phase of ``phase_s`` per window of the trace, its rate the window's rate mapped
    linearly from the trace's slowest window (``low`` x ``capacity_rps``) to its busiest
    (``high`` x ``capacity_rps``): the trace's shape, with the contrast of a day."""
    if not 0 < low <= high:
        raise ValueError(f"loads low={low} and high={high} must satisfy 0 < low <= high (fractions of capacity)")
    if capacity_rps <= 0 or phase_s <= 0:
        raise ValueError(f"capacity_rps={capacity_rps} and phase_s={phase_s} must be positive")
    rate = trace_rate_curve(trace, windows)
    span = rate.max() - rate.min()
    share = (rate - rate.min()) / span if span > 0 else np.ones_like(rate)
    loads = low + (high - low) * share
    # Named low or high by the middle of the range, so per-phase summaries split the day in two.
    middle = (low + high) / 2
    return [PhaseSpec("high" if load >= middle else "low", phase_s, load * capacity_rps) for load in loads]


@dataclass(frozen=True)
class NamedWorkload:
    """A workload chosen for one trade-off.

    Attributes:
        description: what it is built to show.
        slo_tiers: its SLO tiers, ``NAME:SHARE:SCALE,...`` (SCALE x a request's isolated
            TP-1 latency at 0.9).
        windows: how many windows of the trace's rate curve become load phases.
        low / high: the loads (fractions of nominal capacity) of the trace's slowest and
            busiest windows.
        phase_s: seconds per phase (full runs; the trace's own window is 3,600 / windows s).
        quick_phase_s: seconds per phase in quick runs (their transitions are quicker too:
            instances load in 5 s and the reconfigurator ticks every 30 s).
        lengths: request lengths (``--lengths``), or None for the setting's own.
    """

    description: str
    slo_tiers: str
    windows: int
    low: float
    high: float
    phase_s: float
    quick_phase_s: float
    lengths: str | None = None

    def __post_init__(self) -> None:
        parse_slo_tiers(self.slo_tiers)  # a malformed spec fails at import, saying how to write it
        if self.windows < 1 or not 0 < self.low <= self.high or self.phase_s <= 0 or self.quick_phase_s <= 0:
            raise ValueError(f"named workload {self.description!r}: windows, loads and phase lengths must be positive")

    def phases(
        self, trace: Trace, capacity_rps: float, quick: bool, phase_s: float | None = None, peak: float | None = None
    ) -> list[PhaseSpec]:
        """Its load phases on ``trace``: ``phase_s`` overrides the phase length, and ``peak``
        the busiest window's load (every window's rate scales with it, so the shape stays)."""
        dur = phase_s or (self.quick_phase_s if quick else self.phase_s)
        scale = (peak / self.high) if peak else 1.0
        return diurnal_phases(trace, self.windows, self.low * scale, self.high * scale, capacity_rps, dur)


#: ``--workload`` choices.
NAMED_WORKLOADS = {
    # An interactive tier (two fifths of the requests) whose SLO (0.7 x a request's isolated
    # TP-1 latency at 0.9) most requests of the trace's lengths miss alone on TP-1 at 0.7,
    # the lowest threshold the default quality budget allows on the embedded law (about 0.78
    # of the 0.9 latency there), while TP-4 meets it with room to batch (about 0.43 at 0.7);
    # the shipped trace's hour in three windows (quiet, busy, quiet), from 0.15 x nominal
    # capacity to 1.5 x, where the standard tier alone (0.9 x) needs all of TP-1's
    # throughput. The quiet end is where TP-4 runs small batches: a batch step costs its
    # tokens, so at 0.4 x (0.7 of what all TP-4 carries) an interactive request shares its
    # steps with long standard ones, and all TP-4 met the tier in the quiet phases for 26%
    # of its requests (13% on TP-1); at 0.15 x, for 67% (15% on TP-1).
    # Quick phases of four minutes: a plan executed in waves must hold long enough to pay
    # for its transition. In two-minute phases the first plan's wait for a window that
    # shows the quiet phase (40 s) and the way home's two waves at the rise took most of
    # what all TP-4 gained (reconfiguration +1.1 points; +3.5 in four-minute phases).
    "tp-necessary": NamedWorkload(
        description="an interactive tier only TP-4 can serve, over a day-like rise and fall of the rate",
        slo_tiers="interactive:0.4:0.7,standard:0.6:5",
        windows=3,
        low=0.15,
        high=1.5,
        phase_s=1200.0,
        quick_phase_s=240.0,
        # The trace's own lengths with its own arrivals (long prompts: nominal capacity is
        # about half the paper lengths' request rate, so quick runs hold half the requests).
        lengths="trace",
    ),
}


def named_workload(name: str) -> NamedWorkload:
    """The named workload ``name``, or a ValueError listing the names."""
    if name not in NAMED_WORKLOADS:
        raise ValueError(f"--workload {name!r} is unknown: use one of {', '.join(NAMED_WORKLOADS)}")
    return NAMED_WORKLOADS[name]
