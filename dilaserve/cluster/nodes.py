"""The planner's logical nodes on Ray's nodes.

The control plane plans for ``nodes`` logical nodes of ``gpus_per_node`` GPUs each
(:class:`~dilaserve.cluster.base.InstanceSpec` names one node and GPUs on it). Ray knows
its nodes by id, with their GPU counts, or on a CPU-only cluster their CPU slots (one slot
per TP rank, as the backend reserves them). :class:`NodeMap` binds logical node ``i`` to
the ``i``-th Ray node that has slots (the head node first, then by address and id, so
a given cluster always maps the same way), and a logical node whose Ray node left the
cluster to the first Ray node no logical node holds, once one joins.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


def slot_resource(device: str) -> str:
    """The Ray resource one TP rank reserves: a GPU, or on CPU a CPU slot."""
    return "GPU" if device == "cuda" else "CPU"


@dataclass(frozen=True)
class RayNode:
    """A live Ray node and how many TP ranks it can hold."""

    node_id: str
    address: str
    slots: int
    head: bool = False


def live_nodes(device: str, nodes: list[dict] | None = None) -> list[RayNode]:
    """Ray's live nodes with at least one slot, in binding order (``nodes``: ``ray.nodes()``)."""
    if nodes is None:
        import ray

        nodes = ray.nodes()
    res = slot_resource(device)
    out = [
        RayNode(
            n["NodeID"],
            n.get("NodeManagerAddress", ""),
            int(n.get("Resources", {}).get(res, 0)),
            "node:__internal_head__" in n.get("Resources", {}),
        )
        for n in nodes
        if n.get("Alive")
    ]
    return sorted((n for n in out if n.slots > 0), key=lambda n: (not n.head, n.address, n.node_id))


class NodeMap:
    """Logical node -> Ray node, bound on first use and kept while that Ray node lives."""

    def __init__(self, device: str):
        self.device = device
        self._bound: dict[int, str] = {}
        self._lock = threading.Lock()  # launches resolve their nodes on worker threads

    def bindings(self) -> dict[int, str]:
        """Logical node -> Ray node id, as bound so far."""
        return dict(self._bound)

    def resolve(self, node: int, nodes: list[dict] | None = None) -> RayNode | None:
        """The Ray node of logical ``node`` (None: no live Ray node is free for it). Binding
        a logical node binds every lower unbound one first, so logical order follows Ray's."""
        if node < 0:
            raise ValueError(f"logical node {node} is negative: nodes are numbered from 0")
        live = live_nodes(self.device, nodes)
        with self._lock:
            return self._bind(node, live)

    def _bind(self, node: int, live: list[RayNode]) -> RayNode | None:
        by_id = {n.node_id: n for n in live}
        for k in range(node + 1):
            if self._bound.get(k) in by_id:
                continue
            taken = {v for v in self._bound.values() if v in by_id}
            spare = next((n for n in live if n.node_id not in taken), None)
            if spare is None:
                self._bound.pop(k, None)
                if k == node:
                    return None
                continue
            self._bound[k] = spare.node_id
        return by_id.get(self._bound.get(node, ""))
