"""``bench engine --ray``: what driving a step through Ray adds to it.

One TP-1 :class:`~dilaserve.cluster.ray_backend.RayBackend` instance on a local Ray cluster
and an in-process engine of the same checkpoint step two copies of the same requests, one
step each in turn (one token per step, so the two copies stay equal and the batch stays
full). ``ray_step_overhead_ms`` is, per batch size, the median over steps of the
Ray-driven step (``submit_step`` to its ``StepFinished``, as the server's scheduler sees it)
minus the in-process ``DenoisingEngine.step`` of the same requests; ``ray_transport_ms`` the
median of the round trip minus the engine's step measured inside the worker (the same
difference without the noise of two processes' step times). The first step, which carries
each request's whole state, is left out of both and reported apart
(``ray_first_step_overhead_ms``). Both engines use one torch thread.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import Sequence

import torch

from dilaserve.cluster import ray_local
from dilaserve.cluster.base import InstanceFailed, InstanceReady, InstanceSpec, StepAssignment, StepFinished
from dilaserve.engine import DenoisingEngine, RequestState


async def _measure(engine: DenoisingEngine, checkpoint: str, workloads: dict, steps: int) -> dict:
    from dilaserve.cluster.ray_backend import RayBackend, RayBackendConfig

    backend = RayBackend(RayBackendConfig(checkpoint, torch_threads=1, liveness_interval_s=0))
    events: list = []
    arrived = asyncio.Event()

    def sink(event) -> None:
        events.append(event)
        arrived.set()

    backend.bind(sink)

    async def next_event(kinds: tuple) -> object:
        """The first event of ``kinds``, waiting without spinning (the worker needs the cores)."""
        while True:
            hit = next((e for e in events if isinstance(e, kinds)), None)
            if hit is not None:
                events.remove(hit)
                return hit
            arrived.clear()
            await arrived.wait()

    out: dict = {"overhead": {}, "transport": {}, "first": {}}
    try:
        backend.launch_instance(InstanceSpec("bench", 1, 0, (0,), 1 << 30))
        ready = await asyncio.wait_for(next_event((InstanceReady, InstanceFailed)), backend.config.launch_timeout_s)
        if not isinstance(ready, InstanceReady):
            raise RuntimeError(f"the Ray instance did not start: {ready}")
        for key, (prompts, lengths) in workloads.items():
            local = [
                engine.new_request(p, g, request_id=f"b{key}-{i}") for i, (p, g) in enumerate(zip(prompts, lengths))
            ]
            remote = [RequestState.from_bytes(s.to_bytes()) for s in local]
            thresholds = [math.inf] * len(local)
            overheads, transports = [], []
            for k in range(steps + 1):
                t0 = time.perf_counter()
                engine.step(local, thresholds)
                inproc = time.perf_counter() - t0
                t0 = time.perf_counter()
                backend.submit_step("bench", [StepAssignment(s, t) for s, t in zip(remote, thresholds)])
                ev = await next_event((StepFinished, InstanceFailed))
                if not isinstance(ev, StepFinished):
                    raise RuntimeError(f"the Ray instance failed: {ev}")
                ray_s = time.perf_counter() - t0
                remote = list(ev.states)
                if k == 0:
                    out["first"][key] = round(1000 * (ray_s - inproc), 3)
                else:
                    overheads.append(ray_s - inproc)
                    transports.append(ray_s - (ev.compute_s or 0.0))
            if [s.response.tolist() for s in remote] != [s.response.tolist() for s in local]:
                raise RuntimeError("the Ray-driven copies of the requests differ from the in-process ones")
            for st in local:
                engine.release(st.request_id)
            backend.release("bench", [s.request_id for s in remote])
            out["overhead"][key] = round(1000 * statistics.median(overheads), 3)
            out["transport"][key] = round(1000 * statistics.median(transports), 3)
    finally:
        await backend.shutdown()
    return out


def ray_step_overhead(
    engine: DenoisingEngine, checkpoint: str, workloads: dict[str, tuple[Sequence, Sequence[int]]], steps: int = 12
) -> dict:
    """``{"ray_step_overhead_ms", "ray_transport_ms", "ray_first_step_overhead_ms"}``, each
    ``{batch: ms}``, for ``workloads`` (``{batch: (prompts, gen_lengths)}``); starts a local
    Ray cluster unless this process is connected to one."""
    started = ray_local.connect(None, 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = asyncio.run(_measure(engine, checkpoint, workloads, steps))
    finally:
        torch.set_num_threads(threads)
        ray_local.disconnect(started)
    return {
        "ray_step_overhead_ms": out["overhead"],
        "ray_transport_ms": out["transport"],
        "ray_first_step_overhead_ms": out["first"],
    }
