"""The server's Ray connection: join a cluster, or start a local one and own it.

A local cluster's head processes (GCS, raylet) share the server's process group, so a
SIGTERM sent to that group (``kill -TERM -PGID``, a process manager stopping the job) kills
them at once, while the server is still draining. Every Ray call that needs the GCS then
blocks: killing actors, removing placement groups, and ``ray.shutdown()`` itself, until the
core worker gives up after 60 s with "Failed to connect to GCS ... The program will
terminate". :func:`cluster_alive` lets shutdown see that the cluster is already gone and
skip what cannot succeed; :func:`disconnect` then frees what is left without waiting on it.

A local cluster binds loopback only (:func:`loopback_only`): a Ray GCS anyone can reach runs
anyone's code on the host. Ray takes a node's address to be a remotely reachable one, even
when told 127.0.0.1, and its GCS and raylet then listen on every interface; only where Ray
runs single-node by design (macOS, Windows: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` off) does
it keep the node on loopback, and the GCS and raylet then listen on 127.0.0.1 alone.
"""

from __future__ import annotations

import ipaddress
import logging
import os

log = logging.getLogger(__name__)

#: Ray's switch for a multi-node-capable node address (on by default on Linux).
_CLUSTER_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def loopback_only() -> None:
    """Make the local cluster this process starts bind 127.0.0.1 for every port (GCS, raylet,
    object manager, agents, workers): Ray's single-node mode, for this process and the Ray
    processes it spawns."""
    os.environ[_CLUSTER_ENV] = "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # read when Ray picks the node address


def connect(address: str | None, num_cpus: int | None) -> bool:
    """Join ``address`` or start a local cluster with ``num_cpus`` CPUs; True if this call started Ray.

    A local cluster is one node and binds loopback only, whatever ``--host`` the HTTP server
    listens on: nothing outside this host has any business with it. A cluster of several
    nodes is started by the operator (``ray start``) and joined with ``address``.

    Call it before the HTTP server installs its signal handlers: Ray's core worker installs
    its own SIGTERM handler, which would otherwise pre-empt the graceful drain.
    """
    import ray

    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        loopback_only()
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
