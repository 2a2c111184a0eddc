"""RayBackend: real model instances as Ray actors.

An instance of TP degree d is d :class:`~dilaserve.cluster.worker.InstanceWorker` actors on
the Ray node that its spec's logical node maps to (:class:`~dilaserve.cluster.nodes.NodeMap`:
Ray's nodes, with their GPU counts, or CPU slots on a CPU-only cluster), placed there by
node affinity, so a TP group never spans nodes and the nodes the planner frees and fills are
the ones Ray uses. Every worker holds a shard of the model (torch.distributed: gloo on CPU,
NCCL on GPU, rendezvous at rank 0's node) and an engine over it; a step is sent to all d
workers with identical inputs, so they stay in lockstep through the all-reduces, and rank
0's answer is used.

The scheduler runs on the server's asyncio loop. ``submit_step`` returns at once; a task
awaits the actors' answers and reports :class:`StepFinished` to the scheduler on the same
loop. Each request's state stays on the instance that steps it
(:mod:`dilaserve.engine.step_delta`): a step carries a request's whole state
(``RequestState.to_bytes()``, a few KB) only the first time it runs there, then its id and
threshold; the answer carries each request's commits, which the driver replays on its own
copy, the one the control plane reads. The KV cache crosses the process boundary only when a
block-causal request migrates between instances of one TP degree: its exact cache goes actor
to actor (``ship_caches``; docs/architecture.md, "Block-diffusion models", prices it against
the destination's prefill, which is the fallback).

An instance whose worker dies (at start, during a step, or between steps, which the
liveness pings notice), or whose node leaves the cluster, is freed and reported as
:class:`InstanceFailed`; its requests keep the driver's copy of their last finished step,
and replacing the instance is the control plane's decision. Each :class:`StepFinished`
carries the step's wall time and the requests the engine refused to step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import ray
from ray.exceptions import RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

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
from dilaserve.cluster.nodes import NodeMap, RayNode
from dilaserve.cluster.worker import InstanceWorker
from dilaserve.engine.config import EngineConfig
from dilaserve.engine.state import RequestState
from dilaserve.engine.step_delta import StepReply, adopt_reply, sync_key

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
    gpus_per_node: int | None = None
    """GPUs (or CPU slots) of one of the planner's logical nodes: a Ray node with k times as
    many holds k logical nodes (one machine serving ``--num-slots 4 --slots-per-node 2``).
    None: each Ray node is one logical node."""
    node_poll_s: float = 1.0
    """How often a launch whose logical node has no live Ray node asks Ray again (until
    ``launch_timeout_s``), e.g. while a replacement node joins."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    """Each rank's engine: its K/V pool's memory budget and whether cache steps replay
    captured CUDA graphs."""


def _free(inst: _Instance) -> None:
    for w in inst.workers:
        try:
            ray.kill(w, no_restart=True)
        except Exception:  # already gone
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
    workers: list = field(default_factory=list)
    ready: bool = False
    dead: bool = False
    pids: tuple[int, ...] = ()  # the workers' process ids, once ready
    #: the Ray node ids the workers run on, rank order, once ready
    ray_nodes: tuple[str, ...] = ()
    #: request id -> ``sync_key`` of the state its workers hold (as of its last step here)
    held: dict = field(default_factory=dict)


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
        #: the planner's logical nodes on Ray's nodes
        self.nodes = NodeMap(config.device, config.gpus_per_node)

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

    def placements(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        """Each ready instance's logical node and the Ray node ids its ranks run on."""
        return {i: (inst.spec.node, inst.ray_nodes) for i, inst in self._instances.items() if inst.ready}

    # ------------------------------------------------------------ Backend
    def bind(self, sink: EventSink) -> None:
        self._sink = sink
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None

    def launch_instance(self, spec: InstanceSpec) -> None:
        inst = _Instance(spec)
        self._instances[spec.instance_id] = inst
        self._spawn(self._start(inst))

    async def _node_for(self, spec: InstanceSpec, deadline: float) -> RayNode | None:
        """The live Ray node of ``spec.node``, waiting (until ``deadline``) while none is
        free for it, as Ray would wait for resources."""
        while True:
            node = await asyncio.to_thread(self.nodes.resolve, spec.node)
            if node is not None or time.monotonic() >= deadline:
                return node
            await asyncio.sleep(self.config.node_poll_s)

    def _create_workers(self, spec: InstanceSpec, node: RayNode) -> list:
        cfg = self.config
        opts = dict(
            # hard affinity: the instance runs where the plan put it, or fails
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node.node_id, soft=False),
            num_cpus=1,
            num_gpus=1 if cfg.device == "cuda" else 0,
            max_restarts=0,
        )
        return [
            InstanceWorker.options(**opts).remote(
                cfg.checkpoint, cfg.device, rank, spec.tp, cfg.torch_threads, cfg.engine
            )
            for rank in range(spec.tp)
        ]

    async def _start(self, inst: _Instance) -> None:
        """Place the instance's workers on its node, rendezvous at rank 0's, load, report."""
        spec, timeout = inst.spec, self.config.launch_timeout_s
        deadline = time.monotonic() + timeout
        node = await self._node_for(spec, deadline)
        if inst.dead:  # stopped while waiting for a node
            return
        if node is None:
            self._fail(inst, f"failed to start (no live Ray node for logical node {spec.node} within {timeout:g}s)")
            return
        room = self.config.gpus_per_node or node.slots
        if max(spec.gpus) >= room:
            self._fail(
                inst,
                f"failed to start (logical node {spec.node} has {room} slot(s) on Ray node {node.node_id[:12]}; "
                f"the plan names GPU {max(spec.gpus)}: give the server a --slots-per-node the Ray nodes have)",
            )
            return
        inst.workers = self._create_workers(spec, node)
        try:
            master = None
            if spec.tp > 1:
                master = await asyncio.wait_for(
                    _gather([inst.workers[0].rendezvous.remote()]), max(0.0, deadline - time.monotonic())
                )
                master = master[0]
            pids = await asyncio.wait_for(
                _gather([w.load.remote(master) for w in inst.workers]), max(0.0, deadline - time.monotonic())
            )
            where = await _gather([w.where.remote() for w in inst.workers])
        except (RayError, asyncio.TimeoutError) as e:
            log.error("instance %s failed to start (%s); it is removed", spec.instance_id, e)
            why = type(e).__name__ if isinstance(e, RayError) else f"not ready within {timeout:g}s"
            self._fail(inst, f"failed to start ({why})")
            return
        if inst.dead:  # stopped while loading: its workers are being freed
            return
        inst.ready, inst.pids, inst.ray_nodes = True, tuple(pids), tuple(n for n, _ in where)
        log.info(
            "instance %s ready (TP-%d on logical node %d = Ray node %s)",
            spec.instance_id,
            spec.tp,
            spec.node,
            node.address,
        )
        self._emit(InstanceReady(self.clock(), spec.instance_id))
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
        states = [a.state for a in batch]
        # whole states only for requests the workers do not hold as this copy is
        new = [st.to_bytes() for st in states if inst.held.get(st.request_id) != sync_key(st)]
        ids = [st.request_id for st in states]
        thresholds = [float(a.threshold) for a in batch]
        refs = [w.step.remote(new, ids, thresholds) for w in inst.workers]
        self._spawn(self._await_step(inst, refs, states, time.perf_counter()))

    async def _await_step(self, inst: _Instance, refs: list, sent: list[RequestState], started: float) -> None:
        try:
            reply: StepReply = (await _gather(refs))[0]
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
        states, diverged = adopt_reply(sent, reply)
        for st in states:
            if st.finished:
                inst.held.pop(st.request_id, None)  # the workers dropped it too
            else:
                inst.held[st.request_id] = sync_key(st)
        for rid in diverged:
            log.error(
                "instance %s: request %s's copies disagree after a step; resending its state",
                inst.spec.instance_id,
                rid,
            )
        for rid, err in reply.errors:
            log.error("instance %s could not step %s: %s", inst.spec.instance_id, rid, err)
        # a request in doubt carries its whole state with its next step
        for rid in [*diverged, *(rid for rid, _ in reply.errors)]:
            inst.held.pop(rid, None)
        self._emit(
            StepFinished(
                self.clock(),
                inst.spec.instance_id,
                tuple(states),
                duration_s=duration,
                compute_s=reply.engine_s,
                errors=tuple(reply.errors),
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
        inst.held.pop(request_id, None)
        if self.config.ship_caches and to is not None and len(to.workers) == len(inst.workers):
            for w_src, w_dst in zip(inst.workers, to.workers):
                w_dst.import_cache.remote(request_id, w_src.export_cache.remote(request_id))
        for w in inst.workers:
            w.release.remote([request_id])

    def release(self, instance_id: str, request_ids: list[str]) -> None:
        """Drop caches of cancelled requests."""
        inst = self._instances.get(instance_id)
        if inst is not None:
            for rid in request_ids:
                inst.held.pop(rid, None)
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
