"""The engine core: the control plane and the instances' backend on their own thread.

The scheduler, threshold controller, reconfigurator and :class:`RayBackend` run on an asyncio
loop of their own, in a thread named ``engine-core`` (vLLM V1's ``EngineCore`` is the model).
The HTTP front end (:mod:`dilaserve.serve.runtime`, on uvicorn's loop) only validates,
tokenises and streams; it reaches the core through a typed interface:

- :meth:`EngineCore.submit` a :class:`~dilaserve.control.request.TrackedRequest`,
- :meth:`EngineCore.abort` one by id,
- a stream of :data:`EngineOutput` back, delivered to the front end's ``sink`` in batches
  (one per scheduler event): :class:`Admitted`, :class:`StepOutput` and :class:`FinalOutput`.

The scheduler's observer is the core's one channel from the control plane: its hooks
(steps, outcomes, instance changes) become outputs and metrics. A reconfiguration solve, a LightGBM refresh or load control now hold up the core's
loop only: ``/health`` and the streams of committed text keep flowing. Both threads share the
GIL, so pure-Python work in the core still takes turns with the front end, in slices of
:func:`sys.getswitchinterval` (the server sets it to ``--switch-interval-ms``, 0.5 ms,
against Python's 5 ms), not in one block.

Instance failures reach the core as the observer's ``on_failure`` (counted in the metrics);
the control plane itself re-queues the requests and launches the replacement, and the core
turns replacement off when the server shuts down.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dilaserve.cluster.base import InstanceFailed, InstanceSpec, StepFinished
from dilaserve.cluster.ray_backend import RayBackend
from dilaserve.control.request import TrackedRequest
from dilaserve.engine.state import RequestState
from dilaserve.schedule import GlobalScheduler
from dilaserve.schedule.events import ReconfigTick, RequestArrived, RequestOutcome
from dilaserve.schedule.observer import SchedulerObserver

from .metrics import ServeMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Admitted:
    """The scheduler took the request (it runs or waits for room)."""

    request_id: str


@dataclass(frozen=True)
class StepOutput:
    """A step of the request finished on ``instance_id``; ``state`` is its state after it."""

    request_id: str
    instance_id: str
    state: RequestState


@dataclass(frozen=True)
class FinalOutput:
    """The request's outcome (finished, rejected, cancelled, failed). For a request refused
    by SLO-aware admission, ``alone`` is ``(seconds, tp)``: its predicted time alone on an
    idle instance of the fastest ready TP degree (``ThresholdController.fastest_alone_s``)."""

    outcome: RequestOutcome
    alone: tuple[float, int] | None = None


EngineOutput = Admitted | StepOutput | FinalOutput

#: Seconds of arrivals the core admits before it lets finished steps through.
ARRIVAL_SLICE_S = 0.005
OutputSink = Callable[[list[EngineOutput]], None]


@dataclass(frozen=True)
class CoreSnapshot:
    """What the front end may read without asking the core (replaced whole, never mutated)."""

    ready: tuple[str, ...] = ()
    ready_tp: tuple[int, ...] = ()
    worker_pids: dict | None = None


class EngineCore(SchedulerObserver):
    """Args:
    build: called on the core's thread with the core; returns the backend and the scheduler
        (built there because the backend binds to the loop it is created on). The scheduler
        must take ``core`` as its observer.
    sink: receives every batch of outputs, on the core's thread: it must hand them over to
        its own loop (``call_soon_threadsafe``) and return.
    metrics: the server's metrics (thread-safe), for what only the core sees.
    reconfig_interval_s: seconds between reconfiguration ticks (None: no ticks).
    max_batch_tokens: per TP rank, for the specs of the instances launched at start.
    tp_degrees: the TP degrees the cluster may run (one ``dilaserve:instances`` series each).
    """

    def __init__(
        self,
        build: Callable[[EngineCore], tuple[RayBackend, GlobalScheduler]],
        sink: OutputSink,
        metrics: ServeMetrics,
        reconfig_interval_s: float | None,
        max_batch_tokens: int,
        tp_degrees: Sequence[int] = (1,),
    ):
        self.tp_degrees = tuple(tp_degrees)
        self._build = build
        self._sink = sink
        self.metrics = metrics
        self.reconfig_interval_s = reconfig_interval_s
        self.max_batch_tokens = max_batch_tokens
        self.loop: asyncio.AbstractEventLoop | None = None
        self.backend: RayBackend | None = None
        self.scheduler: GlobalScheduler | None = None
        self.snapshot = CoreSnapshot()
        self._thread: threading.Thread | None = None
        self._requests: dict[str, TrackedRequest] = {}
        self._instance_ids = itertools.count()
        self._tick_task: asyncio.Task | None = None
        self._pending: list[EngineOutput] = []
        #: Arrivals not yet handed to the scheduler, in order, and whether a drain is queued.
        self._arrivals: dict[str, TrackedRequest] = {}
        self._draining = False
        self._flush_scheduled = False
        #: When a step last finished on any instance (``time.monotonic``; None before the
        #: first), for ``/health``: the step loop's progress, readable from any thread.
        self.last_step_at: float | None = None

    # ================================================================ lifecycle
    def start(self, specs: Callable[[EngineCore], Sequence[InstanceSpec]], timeout_s: float = 60.0) -> None:
        """Start the core's thread, build the control plane there and launch ``specs(core)``."""
        built = concurrent.futures.Future()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.loop = loop
            try:
                loop.run_until_complete(self._boot(specs))
            except BaseException as e:  # noqa: BLE001  reported to start()
                built.set_exception(e)
                loop.close()
                return
            built.set_result(None)
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="engine-core", daemon=True)
        self._thread.start()
        built.result(timeout=timeout_s)

    async def _boot(self, specs) -> None:
        self.backend, self.scheduler = self._build(self)
        self.scheduler.start(specs(self))
        if self.reconfig_interval_s and self.scheduler.reconfigurator is not None:
            self._tick_task = asyncio.get_running_loop().create_task(self._tick_loop())

    async def shutdown(self) -> None:
        """Stop ticking, free every instance, stop the core's loop and thread (awaited from
        the front end's loop)."""
        if self.loop is None or self.loop.is_closed():
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
        try:
            await asyncio.wrap_future(fut)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            if self._thread is not None:
                await asyncio.to_thread(self._thread.join, 10)

    async def _shutdown(self) -> None:
        if self.scheduler is not None:
            self.scheduler.replace_failed = False  # an instance dying now is not replaced
        if self._tick_task is not None:
            self._tick_task.cancel()
        if self.backend is not None:
            await self.backend.shutdown()

    # ================================================================ interface (any thread)
    def submit(self, req: TrackedRequest) -> None:
        """Hand a new request to the scheduler; an :class:`Admitted` or a :class:`FinalOutput`
        (refused) follows. Arrivals wait in a queue of their own, drained a slice at a time
        (:meth:`_drain_arrivals`)."""
        self.loop.call_soon_threadsafe(self._queue_arrival, req)

    def abort(self, request_id: str, reason: str = "cancelled by the client") -> None:
        """Withdraw a request (its client left, a stop string ended it, shutdown)."""
        self.loop.call_soon_threadsafe(self._abort, request_id, reason)

    def call(self, fn: Callable, *args) -> concurrent.futures.Future:
        """Run ``fn(*args)`` on the core's loop (operator actions, tests); its result or error
        comes back in the future."""
        fut = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001  handed to the caller
                fut.set_exception(e)

        self.loop.call_soon_threadsafe(run)
        return fut

    @property
    def in_flight(self) -> int:
        return len(self._requests)

    def new_spec(self, tp: int, node: int, first_gpu: int) -> InstanceSpec:
        return InstanceSpec(
            f"inst-{next(self._instance_ids)}",
            tp,
            node,
            tuple(range(first_gpu, first_gpu + tp)),
            self.max_batch_tokens * tp,
        )

    # ================================================================ on the core's loop
    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._pending:
            batch, self._pending = self._pending, []
            self._sink(batch)

    def _queue_arrival(self, req: TrackedRequest) -> None:
        self._arrivals[req.request_id] = req
        if not self._draining:
            self._draining = True
            self.loop.call_soon(self._drain_arrivals)

    def _drain_arrivals(self) -> None:
        """Admit queued arrivals for up to :data:`ARRIVAL_SLICE_S`, then yield the loop.

        Each arrival costs the control plane milliseconds (placement, admission, the
        tuner's sample); a burst of hundreds queued as one callback each held a finished
        step behind all of them, seconds on a 2-core machine (``bench burst``), while the
        instances sat idle. Between slices the loop runs what became ready meanwhile: the
        finished steps, which submit the next ones."""
        deadline = time.perf_counter() + ARRIVAL_SLICE_S
        while self._arrivals:
            rid, req = next(iter(self._arrivals.items()))
            del self._arrivals[rid]
            try:
                self._arrive(req)
            except Exception:  # one arrival's failure must not stall those behind it
                log.exception("the control plane failed on the arrival of %s", rid)
            if time.perf_counter() >= deadline:
                break
        if self._arrivals:
            self.loop.call_soon(self._drain_arrivals)
        else:
            self._draining = False

    def _arrive(self, req: TrackedRequest) -> None:
        rid = req.request_id
        self._requests[rid] = req
        self.scheduler.handle(RequestArrived(req.arrival, req))
        if rid in self.scheduler.requests:
            self._pending.append(Admitted(rid))
        self._flush()

    def _abort(self, request_id: str, reason: str) -> None:
        if self._arrivals.pop(request_id, None) is not None:
            return  # withdrawn before the scheduler saw it: nothing to free or answer
        self.scheduler.cancel(request_id, reason)
        self._requests.pop(request_id, None)
        self._flush()

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self.reconfig_interval_s)
            self.scheduler.handle(ReconfigTick(self.backend.clock()))
            self._flush()

    # ---------------------------------------------------------------- the observer
    def on_outcome(self, out: RequestOutcome) -> None:
        req = self._requests.pop(out.request_id, None)
        alone = None
        if out.status == "rejected" and out.retry_after_s is not None and req is not None:
            tps = list(self.snapshot.ready_tp) or sorted({int(t) for t in self.scheduler.pool.tp})
            alone = self.scheduler.controller.fastest_alone_s(req, sorted(set(tps)))
        self._pending.append(FinalOutput(out, alone))
        self._flush_soon()

    def on_step(self, ev: StepFinished) -> None:
        self.last_step_at = time.monotonic()
        slot = self.scheduler.pool.slot_of.get(ev.instance_id)
        if ev.duration_s is not None and slot is not None:
            self.metrics.step_latency.labels(str(int(self.scheduler.pool.tp[slot]))).observe(ev.duration_s)
        if ev.errors:
            self.metrics.step_errors.inc(len(ev.errors))
        self._pending.extend(StepOutput(st.request_id, ev.instance_id, st) for st in ev.states)
        self._flush_soon()

    def on_failure(self, event: InstanceFailed, resumed: int, replacement: str | None) -> None:
        self.metrics.instance_failures.inc()
        self.metrics.resumed.inc(resumed)  # they go on elsewhere from their last state

    def on_migration(self, request_id: str, src: str, dst: str) -> None:
        self.metrics.migrations.inc()

    def on_plan(self, plan) -> None:
        self.metrics.reconfigurations.inc()

    def on_instance(self, instance_id: str, ready: bool) -> None:
        pool = self.scheduler.pool
        slots = np.flatnonzero(pool.ready & pool.active)
        self.snapshot = CoreSnapshot(
            tuple(pool.ids[s] for s in slots),
            tuple(int(pool.tp[s]) for s in slots),
            self.backend.worker_pids(),
        )
        for tp in sorted(set(self.tp_degrees) | set(self.snapshot.ready_tp)):
            self.metrics.instances.labels(str(tp)).set(self.snapshot.ready_tp.count(tp))
        self._flush_soon()

    def _flush_soon(self) -> None:
        # Outputs raised inside a scheduler event go out together once the event is handled.
        if self._pending and not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)
