"""Schedulers for tests, built by the one wiring site (``build_control_plane``), and the
moves tests make on them: launch instances, send requests, finish steps."""

from __future__ import annotations

from dilaserve.cluster.base import InstanceReady, InstanceSpec, StepFinished
from dilaserve.control.config import ControlConfig
from dilaserve.predict.base import OneShotPredictor
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.schedule import RequestArrived
from dilaserve.schedule.control_plane import ControlPlaneSpec, build_control_plane
from tests.control.builders import commit, default_profile
from tests.schedule.fake_backend import RecordingBackend

#: Steps per token at each candidate threshold, for the one-shot predictor of :func:`cluster`.
SPT = {0.5: 0.3, 0.6: 0.35, 0.7: 0.45, 0.8: 0.55, 0.9: 0.7}


def build_scheduler(backend, policy="dilaserve-no-reconfig", predictor=None, *, profile=None, observer=None, **spec):
    """The scheduler ``build_control_plane`` makes for ``policy`` over ``backend``, on
    :func:`default_profile` and a one-node, four-GPU cluster; ``spec`` sets any other
    :class:`ControlPlaneSpec` field (``control``, ``cluster``, ``reconfig``, ``accuracy``,
    ``scheduler``...)."""
    fields = {"control": ControlConfig(), "cluster": ClusterConfig(nodes=1, gpus_per_node=4), **spec}
    return build_control_plane(
        backend, policy, ControlPlaneSpec(profile or default_profile(), **fields), predictor, observer
    )


def spec(iid, tp=1, max_batch=1000, node=0):
    """An instance on the first ``tp`` GPUs of ``node``."""
    return InstanceSpec(iid, tp, node, tuple(range(tp)), max_batch)


def cluster(policy="dilaserve-no-reconfig", specs=(), **kw):
    """A scheduler with a one-shot predictor over a :class:`RecordingBackend`, its ``specs``
    launched and ready at time 0; ``kw`` as :func:`build_scheduler`'s."""
    be = RecordingBackend()
    sched = build_scheduler(be, policy, OneShotPredictor(SPT), **kw)
    sched.start(specs)
    for s in specs:
        sched.handle(InstanceReady(0.0, s.instance_id))
    return sched, be


def arrive(sched, req, t=0.0):
    sched.handle(RequestArrived(t, req))
    return req


def finish_step(sched, be, iid, t, k=1):
    """Report the last submitted step of ``iid`` finished, each request committing ``k`` tokens."""
    batch = be.last_batch(iid)
    for a in batch:
        commit(sched.requests[a.state.request_id], k, a.threshold)
    sched.handle(StepFinished(t, iid, tuple(a.state for a in batch)))
