"""The planner's logical nodes on Ray's nodes.

The control plane plans for ``nodes`` logical nodes of ``gpus_per_node`` GPUs each
(:class:`~dilaserve.cluster.base.InstanceSpec` names one node and GPUs on it). Ray knows
its nodes by id, with their GPU counts, or on a CPU-only cluster their CPU slots (one slot
per TP rank, as the backend reserves them). :class:`NodeMap` binds logical node ``i`` to
the ``i``-th seat for a logical node on Ray's nodes (the head node first, then by address and
id, so a given cluster always maps the same way; a Ray node holds as many logical nodes as
their size fits in it), and a logical node whose Ray node left the cluster to the first seat
no logical node holds, once one joins.
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
    """Logical node -> Ray node, bound on first use and kept while that Ray node lives.

    ``per_node`` is a logical node's GPUs (or CPU slots): a Ray node with ``k`` times as many
    holds ``k`` logical nodes (one machine serving two logical nodes of two slots from its
    four). None: each Ray node is one logical node, whatever its size.
    """

    def __init__(self, device: str, per_node: int | None = None):
        if per_node is not None and per_node < 1:
            raise ValueError(f"per_node {per_node}: a logical node holds at least one GPU or CPU slot")
        self.device = device
        self.per_node = per_node
        self._bound: dict[int, tuple[str, int]] = {}  # logical node -> (Ray node id, seat on it)
        self._lock = threading.Lock()  # launches resolve their nodes on worker threads

    def bindings(self) -> dict[int, str]:
        """Logical node -> Ray node id, as bound so far."""
        return {k: node_id for k, (node_id, _) in self._bound.items()}

    def seats(self, live: list[RayNode]) -> list[tuple[str, int]]:
        """The logical nodes the live Ray nodes can hold, as ``(node id, seat)``, in binding order."""
        return [(n.node_id, j) for n in live for j in range(n.slots // self.per_node if self.per_node else 1)]

    def resolve(self, node: int, nodes: list[dict] | None = None) -> RayNode | None:
        """The Ray node of logical ``node`` (None: no live Ray node has room for it). Binding
        a logical node binds every lower unbound one first, so logical order follows Ray's."""
        if node < 0:
            raise ValueError(f"logical node {node} is negative: nodes are numbered from 0")
        live = live_nodes(self.device, nodes)
        with self._lock:
            return self._bind(node, live)

    def _bind(self, node: int, live: list[RayNode]) -> RayNode | None:
        by_id = {n.node_id: n for n in live}
        seats = self.seats(live)
        for k in range(node + 1):
            if self._bound.get(k) in seats:
                continue
            taken = {v for v in self._bound.values() if v in seats}
            spare = next((s for s in seats if s not in taken), None)
            if spare is None:
                self._bound.pop(k, None)
                continue
            self._bound[k] = spare
        bound = self._bound.get(node)
        return by_id[bound[0]] if bound is not None else None
