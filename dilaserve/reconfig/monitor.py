"""Workload monitor: request classes by input/output length buckets, with arrival rates."""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass

from dilaserve.reconfig.config import MonitorConfig


@dataclass(frozen=True)
class RequestClass:
    """One class of stage 1: its arrival rate (with the safety margin) and typical shape."""

    key: tuple[int, ...]  # (input bucket, output bucket), and the SLO tier's priority when split by tier
    rate: float  # requests per second
    prompt_tokens: float
    output_tokens: float
    slo_s: float  # the tightest SLO seen in the class (plan for the hardest)

    @property
    def tokens(self) -> float:
        return self.prompt_tokens + self.output_tokens


class WorkloadMonitor:
    def __init__(self, config: MonitorConfig = MonitorConfig()):
        self.config = config
        self._seen: deque[tuple[float, int, int, float, int]] = deque()

    def observe(self, now: float, prompt_tokens: int, output_tokens: int, slo_s: float, priority: int = 0) -> None:
        self._seen.append((now, prompt_tokens, output_tokens, slo_s, priority))

    def arrivals(self, now: float) -> list[float]:
        """Arrival times inside the window, oldest first."""
        self._expire(now)
        return [t for t, *_ in self._seen]

    def requests(self, now: float) -> list[tuple[int, int, float, int]]:
        """``(prompt tokens, output tokens, SLO seconds, priority)`` of each arrival inside
        the window, oldest first."""
        self._expire(now)
        return [(p, o, slo, prio) for _, p, o, slo, prio in self._seen]

    def _expire(self, now: float) -> None:
        while self._seen and self._seen[0][0] < now - self.config.window_s:
            self._seen.popleft()

    def classes(self, now: float, by_tier: bool = False) -> list[RequestClass]:
        """Classes with arrivals inside the window, sorted by key. ``by_tier``: each SLO tier
        (request priority) apart, so a tight tier's SLO is not every request's of its size
        (a class plans for the tightest SLO it holds)."""
        cfg = self.config
        self._expire(now)
        groups: dict[tuple[int, ...], list[tuple[int, int, float]]] = {}
        for _, p, o, slo, prio in self._seen:
            key = (bisect.bisect_right(cfg.input_edges, p), bisect.bisect_right(cfg.output_edges, o))
            groups.setdefault((*key, prio) if by_tier else key, []).append((p, o, slo))
        window = min(cfg.window_s, max(now - self._seen[0][0], 1.0)) if self._seen else cfg.window_s
        out = []
        for key in sorted(groups):
            g = groups[key]
            slos = [s for _, _, s in g if s > 0]
            out.append(
                RequestClass(
                    key=key,
                    rate=len(g) / window * (1 + cfg.safety_margin),
                    prompt_tokens=sum(p for p, _, _ in g) / len(g),
                    output_tokens=sum(o for _, o, _ in g) / len(g),
                    slo_s=min(slos) if slos else float("inf"),
                )
            )
        return out
