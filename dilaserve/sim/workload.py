"""Workloads: timed requests with token counts, split into named load phases."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dilaserve.predict.prompts import Prompt


@dataclass(frozen=True)
class WorkloadRequest:
    """One request of a workload.

    ``output_tokens`` is the answer length the trace or benchmark asks for; the simulated
    canvas rounds it up to whole blocks. ``prompt`` is set only where a real model decodes
    the request (model mode) and grades its answer. ``tier``, ``priority`` and ``slo_s``
    come from SLO tiers (:func:`dilaserve.sim.slo.with_slo_tiers`); without them the run's
    one SLO applies. ``min_threshold`` is the client's quality floor (a server's
    ``min_threshold``): no step of the request runs below the lowest candidate threshold at
    or above it, whatever the operating point pins.
    """

    request_id: str
    arrival: float
    prompt_tokens: int
    output_tokens: int
    phase: str = ""
    prompt: Prompt | None = None
    tier: str = ""
    priority: int = 0
    slo_s: float | None = None
    min_threshold: float = 0.0


@dataclass(frozen=True)
class Phase:
    """A named stretch of a workload (e.g. the low-load and the high-load phase)."""

    name: str
    start: float
    end: float
    rate: float  # requests per second the phase was built for


@dataclass
class Workload:
    name: str
    requests: list[WorkloadRequest]
    phases: tuple[Phase, ...] = ()
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        arrivals = [r.arrival for r in self.requests]
        if any(b < a for a, b in zip(arrivals, arrivals[1:])):
            raise ValueError(f"workload {self.name!r}: requests must be sorted by arrival time")

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def duration_s(self) -> float:
        if self.phases:
            return self.phases[-1].end
        return self.requests[-1].arrival if self.requests else 0.0

    @property
    def mean_rate(self) -> float:
        return len(self) / self.duration_s if self.duration_s > 0 else 0.0


def build_workload(
    name: str,
    arrivals: np.ndarray,
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    phases: Sequence[Phase] = (),
    prompts: Sequence[Prompt] | None = None,
    meta: dict | None = None,
) -> Workload:
    """Zip arrays into a workload; each request's phase is the phase its arrival falls in."""
    n = len(arrivals)
    if not (len(prompt_tokens) == len(output_tokens) == n):
        raise ValueError(f"{n} arrivals but {len(prompt_tokens)} prompt and {len(output_tokens)} output lengths")
    if prompts is not None and len(prompts) != n:
        raise ValueError(f"{n} arrivals but {len(prompts)} prompts")
    order = np.argsort(arrivals, kind="stable")
    starts = np.array([p.start for p in phases])
    reqs = []
    for j, i in enumerate(order.tolist()):
        t = float(arrivals[i])
        phase = phases[max(0, int(np.searchsorted(starts, t, side="right")) - 1)].name if phases else ""
        reqs.append(
            WorkloadRequest(
                f"{name}-{j:06d}",
                t,
                max(1, int(prompt_tokens[i])),
                max(1, int(output_tokens[i])),
                phase,
                prompts[i] if prompts is not None else None,
            )
        )
    return Workload(name, reqs, tuple(phases), dict(meta or {}))
