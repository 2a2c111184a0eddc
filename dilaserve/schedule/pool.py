"""The scheduler's view of the instances, as arrays the policies can scan at once.

Per-instance numbers (TP degree, tokens and requests in the batch, batch limit, whether it
accepts new work) live in numpy arrays indexed by slot, so selecting an instance among
dozens is a few vector operations rather than a Python loop.
"""

from __future__ import annotations

import numpy as np

from dilaserve.cluster.base import InstanceSpec


class InstancePool:
    def __init__(self, capacity: int = 16):
        self.ids: list[str | None] = []
        self.specs: list[InstanceSpec | None] = []
        # Request ids per slot, in assignment order: a dict rather than a set so that batch
        # (and so migration) order does not depend on string hashing, and runs repeat exactly.
        self.members: list[dict[str, None]] = []
        self.slot_of: dict[str, int] = {}
        self._free: list[int] = []
        self.tp = np.zeros(0, dtype=np.int64)
        self.tokens = np.zeros(0)
        self.n_reqs = np.zeros(0, dtype=np.int64)
        self.max_batch = np.zeros(0)
        self.active = np.zeros(0, dtype=bool)  # slot holds an instance
        self.ready = np.zeros(0, dtype=bool)  # launched and able to step
        self.draining = np.zeros(0, dtype=bool)  # takes no new requests
        self.usable = np.zeros(0, dtype=bool)  # the latency profile covers its TP degree
        self.busy = np.zeros(0, dtype=bool)  # a step is in flight
        self.accepting = np.zeros(0, dtype=bool)  # ready & usable & not draining
        self._groups: dict[int, np.ndarray] | None = None
        self._grow(capacity)

    def _grow(self, n: int) -> None:
        old = len(self.ids)
        for name in (
            "tp",
            "tokens",
            "n_reqs",
            "max_batch",
            "active",
            "ready",
            "draining",
            "usable",
            "busy",
            "accepting",
        ):
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros(n, dtype=arr.dtype)]))
        self.ids += [None] * n
        self.specs += [None] * n
        self.members += [{} for _ in range(n)]
        self._free += list(range(old + n - 1, old - 1, -1))

    # ------------------------------------------------------------- membership
    def add(self, spec: InstanceSpec, usable: bool) -> int:
        if spec.instance_id in self.slot_of:
            raise ValueError(f"instance {spec.instance_id} is already in the pool")
        if not self._free:
            self._grow(max(len(self.ids), 16))
        s = self._free.pop()
        self.ids[s], self.specs[s] = spec.instance_id, spec
        self.slot_of[spec.instance_id] = s
        self.tp[s], self.max_batch[s] = spec.tp, spec.max_batch_tokens
        self.tokens[s], self.n_reqs[s] = 0, 0
        self.active[s], self.usable[s] = True, usable
        self.ready[s] = self.draining[s] = self.busy[s] = False
        self._refresh(s)
        return s

    def remove(self, slot: int) -> list[str]:
        """Drop an instance; returns the requests still assigned to it (normally none)."""
        left = list(self.members[slot])
        self.slot_of.pop(self.ids[slot], None)
        self.ids[slot] = self.specs[slot] = None
        self.members[slot] = {}
        self.active[slot] = self.ready[slot] = self.busy[slot] = False
        self.tokens[slot], self.n_reqs[slot] = 0, 0
        self._refresh(slot)
        self._free.append(slot)
        return left

    def set_ready(self, slot: int) -> None:
        self.ready[slot] = True
        self._refresh(slot)

    def set_draining(self, slot: int) -> None:
        self.draining[slot] = True
        self._refresh(slot)

    def _refresh(self, s: int) -> None:
        self.accepting[s] = self.active[s] and self.ready[s] and self.usable[s] and not self.draining[s]
        self._groups = None

    # ------------------------------------------------------------ assignments
    def assign(self, slot: int, request_id: str, tokens: int) -> None:
        self.members[slot][request_id] = None
        self.tokens[slot] += tokens
        self.n_reqs[slot] += 1

    def unassign(self, slot: int, request_id: str, tokens: int) -> None:
        self.members[slot].pop(request_id, None)
        self.tokens[slot] -= tokens
        self.n_reqs[slot] -= 1

    # ---------------------------------------------------------------- queries
    def tp_groups(self) -> dict[int, np.ndarray]:
        """Slots of accepting instances, grouped by TP degree (cached until membership changes)."""
        if self._groups is None:
            acc = np.flatnonzero(self.accepting)
            self._groups = {int(d): acc[self.tp[acc] == d] for d in np.unique(self.tp[acc])}
        return self._groups

    def room_mask(self, tokens: int) -> np.ndarray:
        """Accepting instances that can take ``tokens`` more tokens."""
        return self.accepting & (self.tokens + tokens <= self.max_batch)

    def max_room(self) -> float:
        if not self.accepting.any():
            return -1.0
        return float(np.max(np.where(self.accepting, self.max_batch - self.tokens, -1.0)))

    def idle_empty(self, slot: int) -> bool:
        return not self.busy[slot] and self.n_reqs[slot] == 0

    def active_specs(self) -> list[InstanceSpec]:
        return [s for s in self.specs if s is not None]

    def __len__(self) -> int:
        return len(self.slot_of)
