"""RayBackend: real model instances as Ray actors.

An instance of TP degree d is d :class:`InstanceWorker` actors in one
placement group. Every worker holds a shard of the model (torch.distributed:
gloo on CPU, NCCL on GPU) and an engine over it; a step is sent to all d
workers with identical inputs, so they stay in lockstep through the
all-reduces, and rank 0's result is used.

The scheduler runs on the server's asyncio loop. ``submit_step`` returns at
once; a task awaits the actors' results and reports :class:`StepFinished`
to the scheduler on the same loop. Request state crosses the process boundary
as ``RequestState.to_bytes()`` (a few KB). The KV cache crosses it only when a
block-causal request migrates between instances of one TP degree: its exact cache
goes actor to actor (``ship_caches``; docs/architecture.md, "Block-diffusion
models", prices it against the destination's prefill, which is the fallback).

An instance whose worker dies (at start, during a step, or between steps, which the
liveness pings notice) is freed and reported as :class:`InstanceFailed`; replacing it is
the control plane's decision. Each :class:`StepFinished` carries the step's wall time and
the requests the engine refused to step.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ray
from ray.exceptions import RayActorError, RayError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from dilaserve.cluster import ray_local
from dilaserve.cluster.base import (
    Backend,
    EventSink,
    InstanceFailed,
    InstanceReady,
    InstanceSpec,
    InstanceStopped,
    StepAssignment,
    StepFinished,
)
from dilaserve.engine.state import RequestState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RayBackendConfig:
    """How instances are placed on the Ray cluster."""

    checkpoint: str
    """Checkpoint folder every instance loads."""
    device: str = "cpu"
    """``cpu`` (one Ray CPU per worker, gloo) or ``cuda`` (one GPU per worker, NCCL)."""
    torch_threads: int = 1
    """Intra-op threads per CPU worker (keep workers x threads <= cores)."""
    launch_timeout_s: float = 300.0
    """An instance that is not ready by then is reported as failed."""
    ship_caches: bool = False
    """Ship a migrating request's cache to its destination (a block-causal model's, exact)
    instead of letting the destination rebuild it by a prefill."""
    liveness_interval_s: float = 1.0
    """How often a ready instance's workers are pinged. A worker that dies between steps is
    otherwise noticed only by the next step sent to it, and readiness would report it alive."""


@ray.remote(num_cpus=0)
class InstanceWorker:
    """One TP rank of one instance: a (sharded) model and its engine."""

    def __init__(self, checkpoint: str, device: str, rank: int, world_size: int, master: str, torch_threads: int):
        import torch

        from dilaserve.engine import DenoisingEngine
        from dilaserve.model.adapters import load_diffusion_lm

        torch.set_num_threads(torch_threads)
        self.rank = rank
        # Ray exposes the one GPU it assigned to this actor as device 0.
        dev = "cuda:0" if device == "cuda" else device
        if world_size > 1:
            from dilaserve.model.tensor_parallel import init_distributed, shard_model

            init_distributed(rank, world_size, master, dev)
        lm = load_diffusion_lm(checkpoint, device=dev)
        if world_size > 1:
            shard_model(lm.model, rank, world_size)
        self.engine = DenoisingEngine(lm)

    def ready(self) -> int:
        return os.getpid()

    def step(self, payload: list[tuple[bytes, float]]) -> tuple[list[bytes], list[tuple[str, str]]]:
        """The states after one step, and ``(request_id, error)`` for each request the engine
        refused to step. A bad threshold is the control plane's bug, not the client's: the
        state comes back unchanged (the request is retried, never lost) and the error goes
        to the server, which logs and counts it."""
        states = [RequestState.from_bytes(blob) for blob, _ in payload]
        results = self.engine.step(states, [thr for _, thr in payload])
        errors = [(st.request_id, str(res.error)) for st, res in zip(states, results) if res.error]
        return [s.to_bytes() for s in states], errors

    def release(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.engine.release(rid)

    def export_cache(self, request_id: str) -> bytes | None:
        return self.engine.export_cache(request_id)

    def import_cache(self, request_id: str, blob: bytes | None) -> bool:
        return self.engine.import_cache(request_id, blob)


def _free(inst: _Instance) -> None:
    for w in inst.workers:
        try:
            ray.kill(w, no_restart=True)
        except Exception:  # already gone
            pass
    try:
        remove_placement_group(inst.pg)
    except Exception:
        pass


def _retrieve(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


def _gather(refs: list) -> asyncio.Future:
    """``asyncio.gather`` over Ray object refs whose outcome is always retrieved. A step or
    launch cancelled at shutdown leaves its gather to finish later, maybe after the loop is
    gone; unretrieved, it would log "_GatheringFuture exception was never retrieved"."""
    fut = asyncio.gather(*refs)
    fut.add_done_callback(_retrieve)
    return fut


@dataclass
class _Instance:
    spec: InstanceSpec
    workers: list
    pg: object
    ready: bool = False
    dead: bool = False
    pids: tuple[int, ...] = ()  # the workers' process ids, once ready


class RayBackend(Backend):
    """Instances as Ray actors; events delivered on the asyncio loop that created it."""

    def __init__(self, config: RayBackendConfig, clock: Callable[[], float] | None = None):
        self.config = config
        self._t0 = time.monotonic()
        self.clock = clock or (lambda: time.monotonic() - self._t0)
        self._sink: EventSink | None = None
        self._instances: dict[str, _Instance] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task] = set()

    # ------------------------------------------------------------ helpers
    def _spawn(self, coro) -> None:
        loop = self._loop or asyncio.get_event_loop()
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _emit(self, event) -> None:
        if self._sink is not None:
            self._sink(event)

    def worker_pids(self) -> dict[str, list[int]]:
        """Process ids of each ready instance's workers, rank order (for operators and fault drills)."""
        return {i: list(inst.pids) for i, inst in self._instances.items() if inst.ready and not inst.dead}

    def worker_handles(self, instance_id: str) -> list:
        """The actors of an instance (tests use this to kill one)."""
        return list(self._instances[instance_id].workers)

    # ------------------------------------------------------------ Backend
    def bind(self, sink: EventSink) -> None:
        self._sink = sink
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    def launch_instance(self, spec: InstanceSpec) -> None:
        cfg = self.config
        bundle = {"GPU": 1, "CPU": 1} if cfg.device == "cuda" else {"CPU": 1}
        pg = placement_group([dict(bundle) for _ in range(spec.tp)], strategy="STRICT_PACK")
        from dilaserve.utils.net import free_port

        master = f"tcp://127.0.0.1:{free_port()}"
        workers = []
        for rank in range(spec.tp):
            opts = dict(
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=rank
                ),
                num_cpus=1,
                num_gpus=1 if cfg.device == "cuda" else 0,
                max_restarts=0,
            )
            workers.append(
                InstanceWorker.options(**opts).remote(
                    cfg.checkpoint, cfg.device, rank, spec.tp, master, cfg.torch_threads
                )
            )
        inst = _Instance(spec, workers, pg)
        self._instances[spec.instance_id] = inst
        self._spawn(self._await_ready(inst))

    async def _await_ready(self, inst: _Instance) -> None:
        try:
            pids = await asyncio.wait_for(
                _gather([w.ready.remote() for w in inst.workers]), self.config.launch_timeout_s
            )
        except (RayError, asyncio.TimeoutError) as e:
            log.error("instance %s failed to start (%s); it is removed", inst.spec.instance_id, e)
            why = type(e).__name__ if isinstance(e, RayError) else f"not ready within {self.config.launch_timeout_s:g}s"
            self._fail(inst, f"failed to start ({why})")
            return
        inst.ready, inst.pids = True, tuple(pids)
        log.info("instance %s ready (TP-%d)", inst.spec.instance_id, inst.spec.tp)
        self._emit(InstanceReady(self.clock(), inst.spec.instance_id))
        if self.config.liveness_interval_s > 0:
            self._spawn(self._watch(inst))

    async def _watch(self, inst: _Instance) -> None:
        """Ping the instance's workers until it stops; a dead one fails the instance. A ping
        waits behind a running step (an actor runs one call at a time): only a death counts,
        never slowness."""
        while not inst.dead:
            await asyncio.sleep(self.config.liveness_interval_s)
            if inst.dead:
                return
            try:
                await _gather([w.ready.remote() for w in inst.workers])
            except (RayActorError, RayError) as e:
                log.error("instance %s died between steps (%s)", inst.spec.instance_id, type(e).__name__)
                self._fail(inst, f"died between steps ({type(e).__name__})")
                return

    def stop_instance(self, instance_id: str) -> None:
        inst = self._instances.get(instance_id)
        if inst is None:
            return
        self._teardown(inst)
        self._emit(InstanceStopped(self.clock(), instance_id))

    def _teardown(self, inst: _Instance) -> None:
        """Forget the instance now; free its actors and placement group off the event loop.
        Those are GCS calls, and a GCS going down with the server would block them (and with
        them every request) for a minute; a daemon thread never holds up the exit either."""
        inst.dead = True
        self._instances.pop(inst.spec.instance_id, None)
        threading.Thread(target=_free, args=(inst,), name=f"free-{inst.spec.instance_id}", daemon=True).start()

    def _fail(self, inst: _Instance, reason: str) -> None:
        """An instance died: free it and report :class:`InstanceFailed` (the control plane
        re-queues its requests and replaces it)."""
        if inst.dead:
            return
        self._teardown(inst)
        self._emit(InstanceFailed(self.clock(), inst.spec, reason))

    def submit_step(self, instance_id: str, batch: Sequence[StepAssignment]) -> None:
        inst = self._instances[instance_id]
        payload = [(a.state.to_bytes(), float(a.threshold)) for a in batch]
        refs = [w.step.remote(payload) for w in inst.workers]
        self._spawn(self._await_step(inst, refs, time.perf_counter()))

    async def _await_step(self, inst: _Instance, refs: list, started: float) -> None:
        try:
            blobs, errors = (await _gather(refs))[0]
        except (RayActorError, RayError) as e:
            log.error(
                "instance %s died during a step (%s): its requests resume elsewhere from their last state",
                inst.spec.instance_id,
                type(e).__name__,
            )
            self._fail(inst, f"died during a step ({type(e).__name__})")
            return
        if inst.dead:
            return
        duration = time.perf_counter() - started
        for rid, err in errors:
            log.error("instance %s could not step %s: %s", inst.spec.instance_id, rid, err)
        states = tuple(RequestState.from_bytes(b) for b in blobs)
        self._emit(
            StepFinished(
                self.clock(), inst.spec.instance_id, states, duration_s=duration, errors=tuple(map(tuple, errors))
            )
        )

    def migrate(self, state: RequestState, src: str, dst: str) -> None:
        # The state travels with the next step; the source's cache is dropped. With
        # ship_caches, rank r of the source sends its shard to rank r of the destination
        # first (one TP degree: the same heads per rank). Ray runs one caller's calls to an
        # actor in order, so the import lands before the destination's next step; if the
        # source is gone, the import fails, and that step rebuilds the cache instead.
        request_id = state.request_id
        state.drop_cache()
        inst, to = self._instances.get(src), self._instances.get(dst)
        if inst is None:
            return
        if self.config.ship_caches and to is not None and len(to.workers) == len(inst.workers):
            for w_src, w_dst in zip(inst.workers, to.workers):
                w_dst.import_cache.remote(request_id, w_src.export_cache.remote(request_id))
        for w in inst.workers:
            w.release.remote([request_id])

    def release(self, instance_id: str, request_ids: list[str]) -> None:
        """Drop caches of cancelled requests."""
        inst = self._instances.get(instance_id)
        if inst is not None:
            for w in inst.workers:
                w.release.remote(request_ids)

    async def shutdown(self, timeout_s: float = 5.0) -> None:
        """Kill every instance, all at once. Bounded: a cluster that is itself going down may
        never answer a placement-group removal, and shutdown must not hang on it. A local
        cluster already gone (its process group was signalled with the server) took the
        instances with it: there is nothing to tear down, and trying would block."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        # Collect the cancellations, so no step's or launch's future is left unretrieved.
        await asyncio.wait(tasks, timeout=timeout_s) if tasks else None
        instances = list(self._instances.values())
        if not instances:
            return
        if not ray_local.cluster_alive():
            for inst in instances:
                inst.dead = True
            self._instances.clear()
            return
        for inst in instances:
            inst.dead = True
            self._instances.pop(inst.spec.instance_id, None)
        pending = [asyncio.to_thread(_free, inst) for inst in instances]
        try:
            await asyncio.wait_for(asyncio.gather(*pending), timeout_s)
        except asyncio.TimeoutError:
            log.warning(
                "instances %s did not confirm their teardown within %.0fs; Ray frees them with the cluster",
                ", ".join(i.spec.instance_id for i in instances),
                timeout_s,
            )
