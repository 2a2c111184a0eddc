"""Arrival processes: benchmark-style Poisson (optionally bursty) and a shaped real trace."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dilaserve.sim.lengths import LENGTH_MODELS, sample_lengths
from dilaserve.sim.traces import Trace
from dilaserve.sim.workload import Phase, Workload, build_workload


def gamma_arrivals(rate: float, duration_s: float, rng: np.random.Generator, burstiness: float = 1.0) -> np.ndarray:
    """Arrival times over ``[0, duration_s)`` at ``rate`` requests/s.

    Inter-arrival gaps are gamma-distributed with shape ``burstiness`` and mean ``1/rate``
    (as vLLM's benchmark does): 1.0 is a Poisson process, below 1 is burstier.
    """
    if rate <= 0 or duration_s <= 0:
        raise ValueError(f"rate={rate} and duration_s={duration_s} must be positive")
    if burstiness <= 0:
        raise ValueError(f"burstiness={burstiness} must be positive (1.0 = Poisson, < 1 = burstier)")
    n = int(rate * duration_s * 1.5) + 16
    t = np.cumsum(rng.gamma(burstiness, 1.0 / (rate * burstiness), n))
    while t[-1] < duration_s:  # rare: a slow draw; extend rather than truncate the window
        t = np.concatenate([t, t[-1] + np.cumsum(rng.gamma(burstiness, 1.0 / (rate * burstiness), n))])
    return t[t < duration_s]


def poisson_workload(
    rate: float,
    duration_s: float,
    lengths: str = "gsm8k",
    seed: int = 0,
    burstiness: float = 1.0,
    name: str = "poisson",
) -> Workload:
    rng = np.random.default_rng(seed)
    t = gamma_arrivals(rate, duration_s, rng, burstiness)
    prompt, output = sample_lengths(lengths, len(t), rng)
    return build_workload(
        name,
        t,
        prompt,
        output,
        (Phase("all", 0.0, duration_s, rate),),
        meta={"rate": rate, "lengths": lengths, "burstiness": burstiness},
    )


@dataclass(frozen=True)
class PhaseSpec:
    """A phase of a shaped trace: ``duration_s`` of simulated time at ``rate`` requests/s."""

    name: str
    duration_s: float
    rate: float

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.rate <= 0:
            raise ValueError(
                f"phase {self.name!r}: duration_s ({self.duration_s}) and rate ({self.rate}) must be positive"
            )


def shape_trace(trace: Trace, phases: Sequence[PhaseSpec], name: str = "trace") -> Workload:
    """Replay ``trace`` with its time axis compressed (or stretched) per phase.

    Phases take consecutive stretches of the trace (wrapping around at its end); within a
    phase every inter-arrival gap is divided by ``phase.rate / trace.mean_rate``, so the
    phase runs at its target mean rate while keeping the trace's burstiness and its
    requests' token counts. One run thus holds, e.g., a low-load and a high-load phase.
    """
    if not phases:
        raise ValueError("shape_trace needs at least one phase")
    n = len(trace)
    gaps = np.diff(trace.arrival_s, append=trace.arrival_s[-1] + trace.duration_s / (n - 1))
    times, idx, out_phases = [], [], []
    cursor, start = 0, 0.0
    for ph in phases:
        factor = ph.rate / trace.mean_rate
        want = int(ph.rate * ph.duration_s * 1.5) + 16
        while True:  # a sparse stretch of the trace may need more requests than the mean says
            take = (cursor + np.arange(want)) % n
            t = start + np.concatenate(([0.0], np.cumsum(gaps[take][:-1]))) / factor
            if t[-1] >= start + ph.duration_s:
                break
            want *= 2
        inside = t < start + ph.duration_s
        times.append(t[inside])
        idx.append(take[inside])
        cursor = int((cursor + inside.sum()) % n)
        out_phases.append(Phase(ph.name, start, start + ph.duration_s, ph.rate))
        start += ph.duration_s
    sel = np.concatenate(idx)
    return build_workload(
        name,
        np.concatenate(times),
        trace.prompt_tokens[sel],
        trace.output_tokens[sel],
        out_phases,
        meta={
            "source": trace.source,
            "trace_rate": trace.mean_rate,
            "phases": [(p.name, p.duration_s, p.rate) for p in phases],
        },
    )


#: ``lengths`` value that keeps a trace's own token counts (the others are length models).
TRACE_LENGTHS = "trace"


def with_lengths(trace: Trace, lengths: str, seed: int = 0) -> Trace:
    """``trace`` with its arrival times kept and each request's prompt and output lengths
    drawn from the length model ``lengths`` (seeded), so one arrival process can carry
    another service's request mix; ``"trace"`` returns the trace's own token counts."""
    if lengths == TRACE_LENGTHS:
        return trace
    if lengths not in LENGTH_MODELS:
        raise ValueError(
            f"unknown lengths {lengths!r}: use {TRACE_LENGTHS!r} (the trace's own token counts) "
            f"or a length model: {', '.join(LENGTH_MODELS)}"
        )
    prompt, output = sample_lengths(lengths, len(trace), np.random.default_rng(seed))
    return replace(
        trace, source=f"{trace.source} arrivals, {lengths} lengths", prompt_tokens=prompt, output_tokens=output
    )


def prompt_workload(
    prompts: Sequence, rate: float, count_tokens, seed: int = 0, burstiness: float = 1.0, name: str = "prompts"
) -> Workload:
    """Real prompts (``dilaserve.predict.prompts.Prompt``) arriving at ``rate`` requests/s.

    Model mode decodes and grades them; replay mode runs the same requests from their token
    counts. ``count_tokens(text)`` gives a prompt's length in the served model's tokens.
    """
    if not prompts:
        raise ValueError("prompt_workload needs at least one prompt")
    if rate <= 0 or burstiness <= 0:
        raise ValueError(f"rate={rate} and burstiness={burstiness} must be positive")
    rng = np.random.default_rng(seed)
    t = np.concatenate(([0.0], np.cumsum(rng.gamma(burstiness, 1.0 / (rate * burstiness), len(prompts) - 1))))
    prompt = np.array([count_tokens(p.text) for p in prompts])
    output = np.array([p.gen_length for p in prompts])
    end = float(t[-1]) + 1.0 / rate
    return build_workload(
        name,
        t,
        prompt,
        output,
        (Phase("all", 0.0, end, rate),),
        prompts=list(prompts),
        meta={"rate": rate, "burstiness": burstiness},
    )
