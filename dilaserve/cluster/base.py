"""The interface between the control plane and whatever runs the instances.

The scheduler drives a :class:`Backend` (RayBackend: real model replicas; SimBackend:
simulated ones) and never learns which. Calls are fire-and-forget; their outcomes come back
as events through the sink given to :meth:`Backend.bind`, in the order they happen, each
stamped with the backend's clock.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dilaserve.engine.state import RequestState


@dataclass(frozen=True)
class InstanceSpec:
    """One model instance: a TP group of ``tp`` GPUs on one node."""

    instance_id: str
    tp: int
    node: int
    gpus: tuple[int, ...]
    max_batch_tokens: int

    def __post_init__(self) -> None:
        if len(self.gpus) != self.tp:
            raise ValueError(f"instance {self.instance_id}: TP-{self.tp} needs {self.tp} GPUs, got {self.gpus}")


@dataclass(frozen=True)
class StepAssignment:
    """One request in a submitted step, with the threshold to decode it at."""

    state: RequestState
    threshold: float


# ------------------------------------------------------------------ backend events
@dataclass(frozen=True)
class StepFinished:
    """An instance finished one denoising step over the batch it was given.

    ``states`` are the requests' states after the step (the same objects for an in-process
    backend, fresh copies for a remote one); the scheduler adopts them.
    """

    time: float
    instance_id: str
    states: tuple[RequestState, ...]
    #: Seconds the step took on the instance (wall clock on a real one, the latency
    #: profile's on a simulated one); None where the backend does not measure it.
    duration_s: float | None = None
    #: Seconds of the engine's step itself on a remote instance (the rest of ``duration_s``
    #: is transport and bookkeeping); None where the backend does not measure it apart.
    compute_s: float | None = None
    #: ``(request_id, error)`` for each request the instance refused to step; its state
    #: comes back unchanged, so it is retried, never lost (a bad threshold is a control-plane bug).
    errors: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class InstanceReady:
    """A launched instance has loaded its model and accepts steps."""

    time: float
    instance_id: str


@dataclass(frozen=True)
class InstanceStopped:
    """An instance the scheduler stopped has freed its GPUs."""

    time: float
    instance_id: str


@dataclass(frozen=True)
class InstanceFailed:
    """An instance died (a worker crashed, it failed to start, or the simulator killed it).

    Its GPUs are free again and any step in flight on it is lost: the requests it held keep
    the state of their last finished step. The scheduler re-queues them and, unless told
    not to, launches a replacement on the same GPUs (docs/architecture.md, "One control plane").
    """

    time: float
    spec: InstanceSpec
    reason: str

    @property
    def instance_id(self) -> str:
        return self.spec.instance_id


BackendEvent = StepFinished | InstanceReady | InstanceStopped | InstanceFailed
EventSink = Callable[[object], None]


class Backend(abc.ABC):
    """What the scheduler needs from a cluster of instances."""

    @abc.abstractmethod
    def bind(self, sink: EventSink) -> None:
        """Deliver every later event (``BackendEvent``) to ``sink``."""

    @abc.abstractmethod
    def launch_instance(self, spec: InstanceSpec) -> None:
        """Start an instance on ``spec.gpus``; report :class:`InstanceReady` when it can step,
        or :class:`InstanceFailed` if it cannot start (or dies later)."""

    @abc.abstractmethod
    def stop_instance(self, instance_id: str) -> None:
        """Stop an idle instance and free its GPUs; report :class:`InstanceStopped`.

        The scheduler only stops instances it has drained (no requests, no step in flight).
        """

    @abc.abstractmethod
    def submit_step(self, instance_id: str, batch: Sequence[StepAssignment]) -> None:
        """Run one denoising step over ``batch`` (the instance is idle); report :class:`StepFinished`."""

    @abc.abstractmethod
    def migrate(self, state: RequestState, src: str, dst: str) -> None:
        """Move a request's instance-local data (if any) from ``src`` to ``dst``.

        Called between steps, before the request's next step is submitted to ``dst``; the
        request state itself travels with that :meth:`submit_step`. The K/V of the
        request's current block stay behind, so the backend marks ``state``
        (:meth:`RequestState.drop_cache`) at once: its next step rebuilds them, and the
        control plane prices that rebuild when it re-selects the moved request's threshold.
        A backend that ships a block-causal cache lets the destination's engine use it
        whatever the mark says. With the dual cache the scheduler migrates only before a
        recompute step, where the mark changes nothing.
        """

    def release(self, instance_id: str, request_ids: Sequence[str]) -> None:
        """Drop instance-local data (KV caches) of cancelled requests. Optional: the default
        does nothing, which suits backends that keep no per-request data."""
