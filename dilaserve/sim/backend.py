"""SimBackend: simulated instances on the simulator's event loop.

It implements :class:`~dilaserve.cluster.base.Backend` and nothing more: it decides no
placement, threshold or configuration. A step takes the latency profile's time for the
batch it was given (times optional multiplicative noise); its outcome comes from a
progress model (replayed dynamics or the real model) when the step finishes. Launching an
instance takes a configurable time, and so does moving a request's data between instances.
Like an engine, each simulated instance knows whose K/V it holds: a request whose K/V are
elsewhere (it moved, or its instance died) rebuilds them with a recompute step.
An instance can be killed at a simulated time (:meth:`SimBackend.fail_instance`,
``SimBackendConfig.failures``), as a real one dies: its step in flight is lost and the
control plane is told :class:`~dilaserve.cluster.base.InstanceFailed`.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

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
from dilaserve.cluster.step_cost import batch_pass_tokens
from dilaserve.engine.state import RequestState, StepKind
from dilaserve.profile.types import LatencyProfile
from dilaserve.sim.loop import EventLoop
from dilaserve.sim.progress import ProgressModel
from dilaserve.sim.telemetry import Telemetry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimBackendConfig:
    """Timing of simulated instances.

    Attributes:
        launch_time_s: from ``launch_instance`` to ``InstanceReady`` (loading the weights).
        stop_time_s: from ``stop_instance`` to ``InstanceStopped``.
        migration_time_s: a migrated request's next step on its new instance starts no
            earlier than this after the move (its state crossing the network).
        latency_noise: sigma of a mean-one log-normal factor applied to every step's
            latency; 0 makes step latency exactly the profile's.
        seed: seeds the latency noise.
        failures: ``(time_s, instance_id)`` pairs: the instance dies at that simulated
            time (as :meth:`SimBackend.fail_instance`). An instance that is not running
            then (never launched, stopped, or already dead) is skipped with a warning.
    """

    launch_time_s: float = 20.0
    stop_time_s: float = 0.0
    migration_time_s: float = 0.002
    latency_noise: float = 0.0
    seed: int = 0
    failures: tuple[tuple[float, str], ...] = ()

    def __post_init__(self) -> None:
        for name in ("launch_time_s", "stop_time_s", "migration_time_s", "latency_noise"):
            if getattr(self, name) < 0:
                raise ValueError(f"SimBackendConfig.{name}={getattr(self, name)} must be >= 0 (0 disables it)")
        object.__setattr__(self, "failures", tuple(tuple(f) for f in self.failures))
        for f in self.failures:
            ok = len(f) == 2 and isinstance(f[0], int | float) and math.isfinite(f[0]) and f[0] >= 0
            if not ok or not isinstance(f[1], str) or not f[1]:
                raise ValueError(
                    f"SimBackendConfig.failures holds {f!r}: give (seconds >= 0, instance id) pairs, "
                    "e.g. failures=((30.0, 'inst-0-0'),)"
                )


def batch_step_latency(profile: LatencyProfile, tp: int, batch: Sequence[StepAssignment]) -> float:
    """Latency of one step over a mixed batch, as the engine runs it.

    Recompute requests run together over what their pass runs (``LP_recompute[their
    tokens]``: the whole canvas, or a block-causal prefill's context) and cache requests
    together over their blocks (``LP_cache[sum of block lengths]``, a block-causal append
    feeding one block more); a batch with both pays for both passes.
    """
    rec, cac = batch_pass_tokens(batch)
    lat = profile.latency(tp, rec, StepKind.RECOMPUTE) if rec else 0.0
    if cac:
        lat += profile.latency(tp, cac, StepKind.CACHE)
    return lat


class SimBackend(Backend):
    def __init__(
        self,
        loop: EventLoop,
        profile: LatencyProfile,
        progress: ProgressModel,
        config: SimBackendConfig = SimBackendConfig(),
        telemetry: Telemetry | None = None,
    ):
        self.loop, self.profile, self.progress, self.config = loop, profile, progress, config
        self.telemetry = telemetry or Telemetry()
        self.specs: dict[str, InstanceSpec] = {}
        self.ready: set[str] = set()
        self.busy: set[str] = set()
        self.migrations = 0
        self.launches = 0
        self._sink: EventSink | None = None
        self._data_ready_at: dict[str, float] = {}
        self._launch_delay = config.launch_time_s
        self._rng = random.Random(config.seed)
        self._steps = 0
        self._step_of: dict[str, int] = {}  # instance -> its step in flight
        self._kv_on: dict[str, str] = {}  # request -> the instance that holds its K/V
        for at, instance_id in config.failures:
            self.loop.at(at, lambda i=instance_id: self._scheduled_failure(i))

    # ------------------------------------------------------------ Backend
    def bind(self, sink: EventSink) -> None:
        self._sink = sink

    def launch_instance(self, spec: InstanceSpec) -> None:
        if spec.instance_id in self.specs:
            raise ValueError(f"instance {spec.instance_id} is already launched")
        self._check_gpus(spec)
        self.specs[spec.instance_id] = spec
        self.launches += 1
        self.loop.at(self.loop.now + self._launch_delay, lambda: self._on_ready(spec.instance_id))

    def stop_instance(self, instance_id: str) -> None:
        if instance_id in self.busy:
            raise RuntimeError(f"stop_instance({instance_id}) while a step is in flight: drain it first")
        self.ready.discard(instance_id)
        self.loop.at(self.loop.now + self.config.stop_time_s, lambda: self._on_stopped(instance_id))

    def migrate(self, state: RequestState, src: str, dst: str) -> None:
        self.migrations += 1
        state.drop_cache()  # no cache is shipped: the destination rebuilds it
        self._kv_on.pop(state.request_id, None)
        self._data_ready_at[state.request_id] = self.loop.now + self.config.migration_time_s

    def release(self, instance_id: str, request_ids: Sequence[str]) -> None:
        for rid in request_ids:
            if self._kv_on.get(rid) == instance_id:
                del self._kv_on[rid]

    def submit_step(self, instance_id: str, batch: Sequence[StepAssignment]) -> None:
        if instance_id not in self.ready:
            raise RuntimeError(f"submit_step to {instance_id}, which is not ready (launched and not stopped)")
        if instance_id in self.busy:
            raise RuntimeError(f"submit_step to {instance_id} while its previous step is in flight")
        for a in batch:
            if self._kv_on.get(a.state.request_id, instance_id) != instance_id:
                a.state.drop_cache()  # its K/V died with the instance that held them
        now = self.loop.now
        start = now
        if self._data_ready_at:
            for a in batch:
                start = max(start, self._data_ready_at.pop(a.state.request_id, now))
        latency = batch_step_latency(self.profile, self.specs[instance_id].tp, batch) * self._noise()
        self.busy.add(instance_id)
        self._steps += 1
        self._step_of[instance_id] = step = self._steps
        self.telemetry.on_step(start, latency, batch)
        batch = list(batch)
        self.loop.at(start + latency, lambda: self._on_step(instance_id, step, batch, latency))

    # ------------------------------------------------------------ faults
    def fail_instance(self, instance_id: str, reason: str = "killed by the simulator") -> None:
        """Kill an instance now: its GPUs are free at once, a step in flight on it is lost
        (its requests keep the state of their last finished step) and the sink is told
        :class:`InstanceFailed`. Raises for an instance that is not running."""
        spec = self.specs.pop(instance_id, None)
        if spec is None:
            raise ValueError(
                f"fail_instance({instance_id!r}): no such instance is running; running: {sorted(self.specs)}"
            )
        self.ready.discard(instance_id)
        self.busy.discard(instance_id)
        self._step_of.pop(instance_id, None)
        self.telemetry.on_stopped(self.loop.now, instance_id)
        self._emit(InstanceFailed(self.loop.now, spec, reason))

    def _scheduled_failure(self, instance_id: str) -> None:
        if instance_id not in self.specs:
            log.warning(
                "no instance %s is running at %.3fs to fail (SimBackendConfig.failures); running: %s",
                instance_id,
                self.loop.now,
                sorted(self.specs),
            )
            return
        self.fail_instance(instance_id, f"failure scheduled at {self.loop.now:g}s")

    # ------------------------------------------------------------ helpers
    @contextmanager
    def instant_launches(self) -> Iterator[None]:
        """Launch without delay inside the block (the cluster already running at time 0)."""
        self._launch_delay = 0.0
        try:
            yield
        finally:
            self._launch_delay = self.config.launch_time_s

    def _noise(self) -> float:
        s = self.config.latency_noise
        return math.exp(self._rng.gauss(-0.5 * s * s, s)) if s else 1.0

    def _check_gpus(self, spec: InstanceSpec) -> None:
        for other in self.specs.values():
            if other.node == spec.node and set(other.gpus) & set(spec.gpus):
                raise RuntimeError(
                    f"instance {spec.instance_id} wants GPUs {spec.gpus} of node {spec.node}, still held by "
                    f"{other.instance_id}: stop it first"
                )

    def _emit(self, event) -> None:
        if self._sink is None:
            raise RuntimeError("SimBackend has no event sink: call bind() (the scheduler does) before using it")
        self._sink(event)

    def _on_ready(self, instance_id: str) -> None:
        if instance_id not in self.specs:
            return  # stopped before it finished launching
        self.ready.add(instance_id)
        self.telemetry.on_ready(self.loop.now, instance_id, self.specs[instance_id].tp)
        self._emit(InstanceReady(self.loop.now, instance_id))

    def _on_stopped(self, instance_id: str) -> None:
        self.specs.pop(instance_id, None)
        self.telemetry.on_stopped(self.loop.now, instance_id)
        self._emit(InstanceStopped(self.loop.now, instance_id))

    def _on_step(self, instance_id: str, step: int, batch: list[StepAssignment], latency: float) -> None:
        if self._step_of.get(instance_id) != step:
            return  # the instance died during the step: its outcome is lost with it
        del self._step_of[instance_id]
        self.progress.step(batch)
        for a in batch:
            if a.state.finished:
                self._kv_on.pop(a.state.request_id, None)
            else:
                self._kv_on[a.state.request_id] = instance_id
        self.busy.discard(instance_id)
        self._emit(StepFinished(self.loop.now, instance_id, tuple(a.state for a in batch), duration_s=latency))
