"""The simulator's clock: a heap of timed actions, run in time order.

Ties run in the order they were scheduled, so a run is deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable


class EventLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self.events = 0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0
        self._stopped = False

    def at(self, time: float, action: Callable[[], None]) -> None:
        """Run ``action`` at ``time`` (never earlier than now: the past cannot be changed)."""
        self._seq += 1
        heapq.heappush(self._heap, (max(time, self.now), self._seq, action))

    def stop(self) -> None:
        self._stopped = True

    def __len__(self) -> int:
        return len(self._heap)

    def run(self, until: float | None = None) -> None:
        """Run actions until none is left, :meth:`stop` is called, or time passes ``until``."""
        heap, pop = self._heap, heapq.heappop
        self._stopped = False
        while heap and not self._stopped:
            if until is not None and heap[0][0] > until:
                self.now = until
                return
            t, _, action = pop(heap)
            self.now = t
            self.events += 1
            action()
