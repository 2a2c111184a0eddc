"""Latency profiles: step latency of one instance per TP degree (docs/architecture.md section 5).

``LP[tp][n]`` is the wall time of one denoising step on a TP-``tp`` instance whose batch
holds ``n`` tokens. Recompute steps (whole sequence) and cache steps (current block only)
have separate curves. Curves are piecewise-linear over measured points; past the last
point they extrapolate the last segment linearly, and below the first point they clamp to
the first point's latency (a step is never cheaper than the smallest one measured, and an
extrapolated latency must never reach zero or go negative).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dilaserve.engine.state import StepKind


class MissingTPDegreeError(KeyError):
    """The profile has no curve for a TP degree the cluster wants to use."""

    def __init__(self, profile: str, tp: int, kind: StepKind, available: Sequence[int]):
        self.tp, self.kind, self.available = tp, kind, tuple(available)
        super().__init__(
            f"latency profile {profile!r} has no {kind.value}-step curve for TP-{tp} "
            f"(it covers TP {list(available)}): profile TP-{tp} on this hardware, or remove "
            f"{tp} from the cluster's allowed TP degrees"
        )

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@dataclass(frozen=True)
class StepCurve:
    """Step latency (seconds) against tokens in the batch, from measured points."""

    tokens: tuple[float, ...]
    latency_s: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.latency_s) or not self.tokens:
            raise ValueError(
                f"a step curve needs one latency per token count and at least one point; "
                f"got {len(self.tokens)} token counts and {len(self.latency_s)} latencies"
            )
        if any(b <= a for a, b in zip(self.tokens, self.tokens[1:])):
            raise ValueError(f"step-curve token counts must be strictly increasing: {self.tokens}")
        if any(v <= 0 for v in self.latency_s):
            raise ValueError(f"step latencies must be positive seconds: {self.latency_s}")
        # Slope used past the last point; a single point means a flat curve.
        if len(self.tokens) > 1:
            slope = (self.latency_s[-1] - self.latency_s[-2]) / (self.tokens[-1] - self.tokens[-2])
        else:
            slope = 0.0
        object.__setattr__(self, "_tail_slope", max(slope, 0.0))

    @classmethod
    def from_points(cls, points: Iterable[tuple[float, float]]) -> StepCurve:
        pts = sorted((float(n), float(s)) for n, s in points)
        return cls(tuple(p[0] for p in pts), tuple(p[1] for p in pts))

    def __call__(self, n: float) -> float:
        """Latency at ``n`` tokens; a scalar fast path (the scheduler calls this per event)."""
        xs, ys = self.tokens, self.latency_s
        if n <= xs[0]:
            return ys[0]
        if n >= xs[-1]:
            return ys[-1] + self._tail_slope * (n - xs[-1])  # type: ignore[attr-defined]
        i = bisect.bisect_right(xs, n)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (n - x0) / (x1 - x0)

    def many(self, n: np.ndarray) -> np.ndarray:
        """Vectorised latency for an array of token counts."""
        n = np.asarray(n, dtype=np.float64)
        out = np.interp(n, self.tokens, self.latency_s)
        tail = n > self.tokens[-1]
        if tail.any():
            out[tail] = self.latency_s[-1] + self._tail_slope * (n[tail] - self.tokens[-1])  # type: ignore[attr-defined]
        return out

    def to_dict(self) -> dict:
        return {"tokens": list(self.tokens), "latency_s": list(self.latency_s)}


@dataclass
class LatencyProfile:
    """Per-TP step-latency curves for recompute and cache steps.

    A profile without cache curves is valid (caching off): cache-step lookups then fall back
    to the recompute curve, which overestimates and so stays on the safe side of an SLO.
    """

    name: str
    recompute: dict[int, StepCurve]
    cache: dict[int, StepCurve] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.recompute = {int(k): v for k, v in self.recompute.items()}
        self.cache = {int(k): v for k, v in self.cache.items()}
        extra = sorted(set(self.cache) - set(self.recompute))
        if extra:
            raise ValueError(
                f"profile {self.name!r} has cache curves for TP {extra} but no recompute curves: "
                "profile recompute steps for those degrees too"
            )

    @property
    def tp_degrees(self) -> tuple[int, ...]:
        return tuple(sorted(self.recompute))

    def has(self, tp: int) -> bool:
        return tp in self.recompute

    def curve(self, tp: int, kind: StepKind = StepKind.RECOMPUTE) -> StepCurve:
        """The curve for ``tp``; raises :class:`MissingTPDegreeError` when it is absent.

        ``kind`` may be the member or its value (``"cache"``): an identity test would send a
        plain string to the recompute curve without a word."""
        if kind == StepKind.CACHE and tp in self.cache:
            return self.cache[tp]
        try:
            return self.recompute[tp]
        except KeyError:
            raise MissingTPDegreeError(self.name, tp, kind, self.tp_degrees) from None

    def latency(self, tp: int, tokens: float, kind: StepKind = StepKind.RECOMPUTE) -> float:
        return self.curve(tp, kind)(tokens)

    # ----------------------------------------------------------- persistence
    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "recompute": {str(k): v.to_dict() for k, v in sorted(self.recompute.items())},
            "cache": {str(k): v.to_dict() for k, v in sorted(self.cache.items())},
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> LatencyProfile:
        def curves(m: Mapping) -> dict[int, StepCurve]:
            return {
                int(k): StepCurve(tuple(map(float, v["tokens"])), tuple(map(float, v["latency_s"])))
                for k, v in m.items()
            }

        return cls(
            name=str(d.get("name", "profile")),
            recompute=curves(d["recompute"]),
            cache=curves(d.get("cache", {})),
            meta=dict(d.get("meta", {})),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, text: str) -> LatencyProfile:
        return cls.from_dict(json.loads(text))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json())

    @classmethod
    def load(cls, path: str | Path) -> LatencyProfile:
        return cls.from_json(Path(path).read_text())
