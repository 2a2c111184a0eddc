"""One TP rank of a Ray-hosted instance: a (sharded) model, its engine, and the requests it holds.

A worker starts empty (:class:`InstanceWorker` is cheap to construct) and loads its model in
:meth:`InstanceWorker.load`, once every rank of its instance knows the rendezvous address:
rank 0's node and a port free there (:meth:`InstanceWorker.rendezvous`), never the driver's
loopback, which on another machine would be the wrong host.

Each rank keeps the state of every request it steps (:mod:`dilaserve.engine.step_delta`):
a step names held requests by id and carries whole states only for requests new here.
"""

from __future__ import annotations

import os
import socket

import ray

from dilaserve.engine.config import EngineConfig
from dilaserve.engine.step_delta import HeldStates, StepReply


def free_port_on(host: str) -> int:
    """A TCP port on ``host`` (an address of this machine) that nothing listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@ray.remote(num_cpus=0)
class InstanceWorker:
    """One TP rank of one instance."""

    def __init__(
        self,
        checkpoint: str,
        device: str,
        rank: int,
        world_size: int,
        torch_threads: int,
        engine_config: EngineConfig | None = None,
    ):
        import torch

        torch.set_num_threads(torch_threads)
        self.checkpoint, self.device, self.rank, self.world_size = checkpoint, device, rank, world_size
        self.engine_config = engine_config or EngineConfig()
        self.engine = None
        self.held = HeldStates()

    def where(self) -> tuple[str, str]:
        """``(Ray node id, node address)`` of the node this rank runs on."""
        ctx = ray.get_runtime_context()
        return ctx.get_node_id(), ray.util.get_node_ip_address()

    def rendezvous(self) -> str:
        """The torch.distributed address of this instance: this rank's node and a port free
        on it (asked of rank 0 before any rank loads)."""
        host = ray.util.get_node_ip_address()
        return f"tcp://{host}:{free_port_on(host)}"

    def load(self, master: str | None) -> int:
        """Join the instance's process group (TP > 1) and load the model shard; the pid."""
        from dilaserve.engine import DenoisingEngine
        from dilaserve.model.adapters import load_diffusion_lm

        # Ray exposes the one GPU it assigned to this actor as device 0.
        dev = "cuda:0" if self.device == "cuda" else self.device
        if self.world_size > 1:
            from dilaserve.model.tensor_parallel import init_distributed, shard_model

            init_distributed(self.rank, self.world_size, master, dev)
        lm = load_diffusion_lm(self.checkpoint, device=dev)
        if self.world_size > 1:
            shard_model(lm.model, self.rank, self.world_size)
        self.engine = DenoisingEngine(lm, self.engine_config)
        return os.getpid()

    def ready(self) -> int:
        return os.getpid()

    def step(self, new: list[bytes], request_ids: list[str], thresholds: list[float]) -> StepReply | None:
        """Adopt the whole states in ``new``, then step the held ``request_ids``. A bad
        threshold is the control plane's bug, not the client's: the request comes back
        unchanged with an error (it is retried, never lost), which the server logs and counts.
        Only rank 0 answers (the ranks step in lockstep; the others' answers would be equal)."""
        self.held.adopt(new)
        reply = self.held.step(self.engine, request_ids, thresholds)
        return reply if self.rank == 0 else None

    def release(self, request_ids: list[str]) -> None:
        self.held.release(request_ids)
        for rid in request_ids:
            self.engine.release(rid)

    def export_cache(self, request_id: str) -> bytes | None:
        return self.engine.export_cache(request_id)

    def import_cache(self, request_id: str, blob: bytes | None) -> bool:
        return self.engine.import_cache(request_id, blob)
