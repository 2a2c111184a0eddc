"""SLOs: scale x the mean latency of a request alone on a TP-1 instance (docs/architecture.md section 6)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from dilaserve.control.step_law import step_split
from dilaserve.engine.state import StepKind
from dilaserve.predict.replay import ReplayTable
from dilaserve.profile.types import LatencyProfile
from dilaserve.sim.progress import canvas_length
from dilaserve.sim.workload import Workload

DEFAULT_SLO_SCALE = 5.0


def isolated_latency(
    profile: LatencyProfile,
    table: ReplayTable,
    prompt_tokens: int,
    output_tokens: int,
    block_length: int,
    threshold: float,
    tp: int = 1,
    block_causal: bool = False,
) -> float:
    """Expected seconds to decode one request alone, its expected steps split as the family
    prices them (:func:`~dilaserve.control.step_law.step_split`): bidirectional, one
    recompute step per block over its whole canvas and every other step a cache step over
    its block; block-causal, one prefill and every other step a block step (with appends)."""
    gen = canvas_length(output_tokens, block_length)
    steps = table.expected_steps(gen, block_length, threshold)
    split = step_split(steps, prompt_tokens, gen, block_length, block_causal)
    return split.seconds(profile.curve(tp, StepKind.CACHE), profile.curve(tp, StepKind.RECOMPUTE))


def mean_isolated_latency(
    workload: Workload,
    profile: LatencyProfile,
    table: ReplayTable,
    block_length: int,
    threshold: float,
    block_causal: bool = False,
) -> float:
    """Mean isolated TP-1 latency over the workload's requests, at ``threshold``."""
    if not len(workload):
        raise ValueError(f"workload {workload.name!r} is empty: no SLO can be derived from it")
    lat = [
        isolated_latency(profile, table, r.prompt_tokens, r.output_tokens, block_length, threshold, 1, block_causal)
        for r in workload.requests
    ]
    return float(np.mean(lat))


def workload_slo(
    workload: Workload,
    profile: LatencyProfile,
    table: ReplayTable,
    block_length: int,
    threshold: float,
    scale: float = DEFAULT_SLO_SCALE,
    block_causal: bool = False,
) -> float:
    """One SLO for every request of the workload: ``scale`` x its mean isolated latency at
    ``threshold`` (the baselines' fixed threshold, the paper's default 0.9)."""
    if scale <= 0:
        raise ValueError(f"SLO scale {scale} must be positive (the paper sweeps 1 to 10, default 5)")
    return scale * mean_isolated_latency(workload, profile, table, block_length, threshold, block_causal)


@dataclass(frozen=True)
class SloTier:
    """One SLO tier of a workload: ``share`` of the requests, each with an SLO of ``scale`` x
    its own isolated TP-1 latency at the baselines' threshold (0.9), and a quality floor of
    ``min_threshold`` (a server's ``min_threshold``: its requests run at no lower threshold;
    0: none)."""

    name: str
    share: float
    scale: float
    min_threshold: float = 0.0

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"SLO tier name {self.name!r} must be a word, e.g. interactive")
        if not 0 < self.share <= 1:
            raise ValueError(f"SLO tier {self.name!r}: share {self.share} must lie in (0, 1]")
        if self.scale <= 0:
            raise ValueError(f"SLO tier {self.name!r}: scale {self.scale} must be positive (x isolated latency)")
        if not 0 <= self.min_threshold <= 1:
            raise ValueError(
                f"SLO tier {self.name!r}: quality floor {self.min_threshold} must lie in [0, 1] (a threshold, e.g. 0.9)"
            )

    @property
    def spec(self) -> str:
        """The tier as ``--slo-tiers`` writes it."""
        base = f"{self.name}:{self.share:g}:{self.scale:g}"
        return f"{base}:{self.min_threshold:g}" if self.min_threshold else base


#: ``--slo-tiers`` default: a third interactive, half standard, a fifth batch.
DEFAULT_SLO_TIERS = "interactive:0.3:1.5,standard:0.5:5,batch:0.2:20"


def parse_slo_tiers(text: str) -> tuple[SloTier, ...]:
    """``NAME:SHARE:SCALE[:FLOOR],...`` (shares summing to 1) as tiers; FLOOR, a quality
    floor for the tier's requests, is optional."""
    tiers = []
    for part in text.split(","):
        fields = part.strip().split(":")
        if len(fields) not in (3, 4):
            raise ValueError(
                f"SLO tier {part.strip()!r} is not NAME:SHARE:SCALE or NAME:SHARE:SCALE:FLOOR: "
                f"write e.g. {DEFAULT_SLO_TIERS!r}"
            )
        name, *numbers = fields
        try:
            tiers.append(SloTier(name, *(float(x) for x in numbers)))
        except ValueError as e:
            if "could not convert" in str(e):
                raise ValueError(f"SLO tier {part.strip()!r}: SHARE, SCALE and FLOOR must be numbers") from None
            raise
    if len({t.name for t in tiers}) != len(tiers):
        raise ValueError(f"SLO tiers {text!r} name a tier twice: give each tier one entry")
    total = sum(t.share for t in tiers)
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"SLO tier shares of {text!r} sum to {total:g}: make them sum to 1")
    return tuple(tiers)


def tier_priorities(tiers: Sequence[SloTier]) -> dict[str, int]:
    """Each tier's priority: the tighter its SLO scale, the higher (load control caps the
    highest priority last; the loosest tier gets 0)."""
    scales = sorted({t.scale for t in tiers}, reverse=True)
    return {t.name: scales.index(t.scale) for t in tiers}


def with_slo_tiers(
    workload: Workload,
    tiers: Sequence[SloTier],
    profile: LatencyProfile,
    table: ReplayTable,
    block_length: int,
    threshold: float,
    block_causal: bool = False,
    seed: int = 0,
) -> Workload:
    """``workload`` with each request drawn into a tier (seeded, by share) and given that
    tier's priority, its quality floor, and an SLO of its scale x its own isolated TP-1
    latency at ``threshold``."""
    rng = np.random.default_rng(seed + 7919)
    shares = np.array([t.share for t in tiers])
    picks = rng.choice(len(tiers), size=len(workload), p=shares / shares.sum())
    prio = tier_priorities(tiers)
    out = []
    for r, k in zip(workload.requests, picks.tolist()):
        tier = tiers[k]
        alone = isolated_latency(
            profile, table, r.prompt_tokens, r.output_tokens, block_length, threshold, 1, block_causal
        )
        out.append(
            replace(
                r,
                tier=tier.name,
                priority=prio[tier.name],
                slo_s=tier.scale * alone,
                min_threshold=tier.min_threshold,
            )
        )
    meta = {**workload.meta, "slo_tiers": ",".join(t.spec for t in tiers)}
    return Workload(workload.name, out, workload.phases, meta)
