"""The serving runtime's front end: the HTTP loop's side of the engine core.

Requests enter through :meth:`ServingRuntime.prepare` (checks and tokenisation,
:mod:`dilaserve.serve.request_prep`, which the API runs off the event loop for a large body)
and :meth:`ServingRuntime.submit`, which hands a
:class:`~dilaserve.control.request.TrackedRequest` to the engine core
(:class:`~dilaserve.serve.engine_core.EngineCore`: the scheduler, controller, reconfigurator
and Ray backend on a thread of their own) and awaits its admission. The core's outputs come
back in batches on this loop, to a :class:`~dilaserve.serve.responses.ResponseRouter` that
streams committed blocks and resolves each request. The control plane is built from
:mod:`dilaserve.serve.control_setup`; the scheduler is the very object the simulator drives.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import sys
import time

from dilaserve.cluster import ray_local
from dilaserve.cluster.base import InstanceSpec
from dilaserve.cluster.ray_backend import RayBackend, RayBackendConfig
from dilaserve.control.request import TrackedRequest
from dilaserve.engine.engine import check_block_length
from dilaserve.engine.state import new_request
from dilaserve.model.adapters import describe_checkpoint
from dilaserve.schedule import GlobalScheduler
from dilaserve.schedule.control_plane import build_control_plane
from dilaserve.schedule.policies import get_policy
from dilaserve.serve.received import waited_s

from .config import ServeConfig
from .control_inputs import load_control_inputs
from .control_setup import connect_ray, control_plane_spec
from .engine_core import EngineCore
from .errors import Overloaded, Unavailable
from .health import Health, judge, stalled_for
from .metrics import ServeMetrics
from .request_prep import PreparedRequest, RequestPreparer
from .responses import RequestHandle, ResponseRouter

log = logging.getLogger(__name__)

#: ``Retry-After`` (seconds) on the 503s of a server starting up or draining: soon, and
#: through the load balancer, which sends the retry to another replica.
RETRY_UNAVAILABLE_S = 1.0


class ServingRuntime:
    def __init__(self, cfg: ServeConfig):
        self.cfg = cfg
        policy = get_policy(cfg.policy)  # unknown names fail here, with the list of choices
        if policy.predictor == "oracle":
            raise ValueError("the oracle policy needs the true remaining steps: it exists only in the simulator")
        self.policy = policy
        self.info = describe_checkpoint(cfg.model)
        # a block-diffusion model denoises blocks of the length it was trained on
        check_block_length(self.info.block_length, cfg.block_length)
        self.model_name = cfg.served_model_name or self.info.name
        self.metrics = ServeMetrics(self.model_name)
        self.preparer = RequestPreparer(cfg, self.info)
        self.handles: dict[str, RequestHandle] = {}
        #: When ``handles`` last went from empty to not (``time.monotonic``), for the stall
        #: that /health measures: an idle spell is not a stall.
        self.busy_since: float | None = None
        self.accepting = False
        self.started = False
        self.notes: list[str] = []
        #: What the control plane runs on, for /health: the step predictor and latency profile.
        self.predictor_name: str | None = None
        self.profile_name: str | None = None
        self._ids = itertools.count()
        self._owns_ray = False
        self.core: EngineCore | None = None
        #: Turns the core's outputs into streams and results (made with the core).
        self.responses: ResponseRouter | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def scheduler(self) -> GlobalScheduler | None:
        """The core's scheduler: touch it only on the core's loop (``core.call``)."""
        return self.core.scheduler if self.core else None

    @property
    def backend(self) -> RayBackend | None:
        """The core's backend: touch it only on the core's loop (``core.call``)."""
        return self.core.backend if self.core else None

    # ================================================================ lifecycle
    async def start(self, ready_timeout_s: float | None = None) -> None:
        cfg = self.cfg
        ready_timeout_s = cfg.startup_timeout_s if ready_timeout_s is None else ready_timeout_s
        self.loop = asyncio.get_running_loop()
        # The engine core's thread shares the GIL with this loop: a short switch interval
        # bounds how long a woken front end waits behind the core's pure-Python work.
        sys.setswitchinterval(cfg.switch_interval_ms / 1000.0)
        self._owns_ray = connect_ray(cfg)
        usable = tuple(d for d in cfg.tp_degrees if d <= cfg.gpus_per_node)
        inputs = await asyncio.to_thread(
            load_control_inputs,
            cfg.model,
            cfg.device,
            cfg.thresholds,
            cfg.artifacts,
            usable if self.info.supports_cache else (1,),
            cfg.block_length,
            self.info.block_causal,
        )
        self.notes = inputs.notes
        predictor = inputs.oneshot if self.policy.predictor == "oneshot" else inputs.predictor
        self.predictor_name = predictor.name if self.policy.selection != "fixed" else "none (fixed threshold)"
        self.profile_name = inputs.profile.name
        spec = control_plane_spec(cfg, inputs)
        backend_cfg = RayBackendConfig(
            cfg.model,
            cfg.device,
            cfg.torch_threads,
            launch_timeout_s=cfg.startup_timeout_s,
            # a block-causal cache is exact and cheaper to ship than to rebuild (measured)
            ship_caches=self.info.block_causal,
            # a local cluster is one Ray node holding every logical node
            gpus_per_node=cfg.gpus_per_node,
            engine=cfg.engine,
        )
        metrics = self.metrics

        def build(core: EngineCore) -> tuple[RayBackend, GlobalScheduler]:
            backend = RayBackend(backend_cfg)
            scheduler = build_control_plane(backend, self.policy, spec, predictor, observer=core)
            # Queue gauges read the scheduler when scraped, so they are never stale.
            metrics.waiting.set_function(lambda: len(scheduler.deferred))
            metrics.running.set_function(lambda: scheduler.in_flight - len(scheduler.deferred))
            return backend, scheduler

        self.core = EngineCore(
            build,
            lambda outs: self.loop.call_soon_threadsafe(self.responses.on_outputs, outs),
            metrics,
            cfg.reconfig.interval_s if cfg.reconfig is not None else None,
            cfg.max_batch_tokens,
            cfg.tp_degrees,
        )
        self.responses = ResponseRouter(self.handles, metrics, self.info.tokenizer, self.core)
        await asyncio.to_thread(self.core.start, self._initial_specs)
        deadline = time.monotonic() + ready_timeout_s
        while not self._ready_instances() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not self._ready_instances():
            raise RuntimeError(f"no instance became ready within {ready_timeout_s:.0f}s; see the Ray worker logs")
        self.accepting = self.started = True
        log.info(
            "serving %s with policy %s on %d instance(s)",
            self.model_name,
            self.policy.name,
            len(self._ready_instances()),
        )

    def _initial_specs(self, core: EngineCore) -> list[InstanceSpec]:
        cfg = self.cfg
        return [
            core.new_spec(cfg.initial_tp, n, g)
            for n in range(cfg.nodes)
            for g in range(0, cfg.gpus_per_node, cfg.initial_tp)
        ]

    def _ready_instances(self) -> list[str]:
        return list(self.core.snapshot.ready) if self.core else []

    def drained(self, deadline: float, answering: bool = False) -> bool:
        """Whether a drain may stop waiting: nothing in flight (no request, and no response
        still being written: ``answering``), no ready instance left to finish what is, or
        ``deadline`` (monotonic) passed."""
        idle = not self.handles and not answering
        return idle or not self._ready_instances() or time.monotonic() >= deadline

    def check_accepting(self) -> None:
        """A 503 that says why, unless the server takes requests."""
        if not self.accepting:
            why = "shutting down; retry on another replica" if self.started else "starting up"
            raise Unavailable(f"the server is not accepting requests: it is {why}", retry_after_s=RETRY_UNAVAILABLE_S)

    def not_ready_reason(self) -> str | None:
        """Why the server cannot serve a request now (for the readiness probe); None when it can."""
        if not self.started:
            return "starting up: no instance is ready yet"
        if not self.accepting:
            return "shutting down"
        if not self._ready_instances():
            return "no instance is ready (all failed or are restarting); requests wait or fail"
        return None

    def health(self) -> Health:
        """The readiness verdict (:mod:`dilaserve.serve.health`): not ready, or the step loop
        stalled while requests wait."""
        waiting = len(self.handles)
        last_step = self.core.last_step_at if self.core else None
        stalled = stalled_for(time.monotonic(), waiting, self.busy_since, last_step)
        return judge(self.not_ready_reason(), waiting, stalled, self.cfg)

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish (bounded), fail the rest, free the cluster."""
        self.accepting = False
        deadline = time.monotonic() + self.cfg.drain_timeout_s
        # Nothing in flight can finish without a ready instance: stop waiting then.
        while self.handles and self._ready_instances() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for rid, h in list(self.handles.items()):
            err = Unavailable(
                "the server is shutting down; retry on another replica", retry_after_s=RETRY_UNAVAILABLE_S
            )
            self.responses.fail(h, err)
            if self.core is not None:
                self.core.abort(rid, reason="server shutdown")
        self.handles.clear()
        if self.core is not None:
            await self.core.shutdown()
        sched = self.scheduler
        if sched is not None and sched.tuner is not None:
            sched.tuner.worker.close()  # the tuner's replay process
        if self._owns_ray:
            ray_local.disconnect(True)

    # ================================================================ requests
    def prepare(self, body) -> PreparedRequest:
        """Check and tokenise a parsed request (``protocol.CompletionRequest`` or chat); raises
        :class:`~dilaserve.serve.errors.BadRequest` naming the field to change.

        It reads only the tokenizer and the config, never the scheduler, so the API runs it
        off the event loop for a large body.
        """
        return self.preparer.prepare(body)

    async def submit(self, prep: PreparedRequest, received_at: float | None = None) -> RequestHandle:
        """Hand one prepared request to the engine core and wait for its admission; raises
        :class:`ServeError` subclasses (a refusal comes before any stream starts).
        ``received_at``: the ``time.monotonic()`` the request reached the server
        (:mod:`dilaserve.serve.received`); its arrival and deadline date from there, so the
        time spent reading, parsing and tokenising it counts against its SLO."""
        self.check_accepting()
        if len(self.handles) >= self.cfg.max_queue:
            raise Overloaded(
                f"{len(self.handles)} requests in flight (limit --max-queue {self.cfg.max_queue}); retry later",
                retry_after_s=1.0,
            )
        waited = waited_s(received_at)
        now = self.core.backend.clock() - waited  # a monotonic clock: safe from any thread
        # A deadline was turned into seconds left when the body was read: from the stamp it is
        # that much further off (a budget, slo_ms, runs from the stamp as it is).
        slo_s = prep.slo_s + waited if prep.slo_field == "deadline" else prep.slo_s
        rid = f"cmpl-{next(self._ids)}-{int(time.time() * 1000) % 10**8}"
        state = new_request(
            rid,
            prep.ids,
            prep.gen_length,
            self.cfg.block_length,
            self.info.mask_id,
            self.info.eos_id,
            use_cache=self.info.supports_cache,
            max_context=self.info.max_context,
            max_tokens=prep.max_tokens,
            block_causal=self.info.block_causal,
        )
        handle = RequestHandle(rid, len(prep.ids), slo_s, now, slo_field=prep.slo_field, stops=prep.stops)
        loop = asyncio.get_running_loop()
        handle.admitted, handle.done = loop.create_future(), loop.create_future()
        if not self.handles:
            self.busy_since = time.monotonic()
        self.handles[rid] = handle
        req = TrackedRequest(
            state, arrival=now, deadline=now + slo_s, priority=prep.priority, min_threshold=prep.min_threshold
        )
        self.core.submit(req)
        await handle.admitted  # a refusal raises here, before any stream starts
        return handle

    def cancel(self, handle: RequestHandle) -> None:
        """The client went away: free its slot (its in-flight step is dropped)."""
        if self.handles.pop(handle.request_id, None) is not None:
            self.core.abort(handle.request_id)
            self.metrics.requests.labels("cancelled").inc()

    def status(self) -> dict:
        return {
            "model": self.model_name,
            "policy": self.policy.name,
            "predictor": self.predictor_name,
            "profile": self.profile_name,
            "instances": self._ready_instances(),
            "running": len(self.handles),
            "notes": self.notes,
            # the quality floors a request may ask for (min_threshold) go up to the highest
            "thresholds": sorted(self.cfg.thresholds),
        }
