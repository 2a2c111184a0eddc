"""The server's Ray connection: join a cluster, or start a local one and own it.

A local cluster's head processes (GCS, raylet) share the server's process group, so a
SIGTERM sent to that group (``kill -TERM -PGID``, a process manager stopping the job) kills
them at once, while the server is still draining. Every Ray call that needs the GCS then
blocks: killing actors, removing placement groups, and ``ray.shutdown()`` itself, until the
core worker gives up after 60 s with "Failed to connect to GCS ... The program will
terminate". :func:`cluster_alive` lets shutdown see that the cluster is already gone and
skip what cannot succeed; :func:`disconnect` then frees what is left without waiting on it.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def connect(address: str | None, num_cpus: int | None) -> bool:
    """Join ``address`` or start a local cluster with ``num_cpus`` CPUs; True if this call started Ray.

    Call it before the HTTP server installs its signal handlers: Ray's core worker installs
    its own SIGTERM handler, which would otherwise pre-empt the graceful drain.
    """
    import ray

    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    return True


def _local_head():
    """The head node this process started (None when it joined a cluster or has no Ray)."""
    try:
        from ray._private import worker

        node = getattr(worker, "_global_node", None)
    except ImportError:
        return None
    return node if node is not None and getattr(node, "head", False) else None


def cluster_alive(timeout_s: float = 1.0) -> bool:
    """Whether the cluster's GCS still answers (within ``timeout_s``).

    Signalled, the head processes stop answering at once but linger for a while, so
    their exit is no test: the GCS's answer is.
    """
    import ray
    from ray._private import worker

    if not ray.is_initialized():
        return False
    try:
        worker.global_worker.gcs_client.get_all_node_info(timeout=timeout_s)
    except Exception:  # noqa: BLE001  any failure to answer means it is gone
        return False
    return True


def disconnect(started: bool) -> bool:
    """Leave Ray; if ``started``, stop the local cluster. Returns False when the cluster was
    already dead: a local one's leftovers are killed, but Ray's own shutdown (here or at
    interpreter exit) would block for a minute on the dead GCS, so the caller should end the
    process with ``os._exit``."""
    import ray

    if not ray.is_initialized():
        return True
    if cluster_alive():
        if started:
            ray.shutdown()
        return True
    log.info("the Ray cluster went down with the server (its process group was signalled); not waiting for it")
    node = _local_head()
    if node is not None:
        try:
            node.kill_all_processes(check_alive=False, allow_graceful=False)
        except Exception as e:  # noqa: BLE001  best effort: the processes are going away anyway
            log.debug("while stopping Ray's processes: %s", e)
    return False
