"""Faults and live changes: a killed instance actor and a live reconfiguration."""

import asyncio
import threading

import httpx
import pytest
import ray

from dilaserve.serve.client import fetch_metrics
from dilaserve.serve.control_setup import reconfigure_to
from tests.builders.waiting import wait_until
from tests.serve.server import LONG, LiveServer, instances

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def cluster_server(ray_cluster):
    s = LiveServer(reconfig_interval_s=0, default_slo_ms=120000).start()
    # /health turns green with the first ready instance; these tests need both
    assert wait_until(lambda: len(instances(s)) == 2, 180)
    yield s
    s.stop()


def send_many(server, n, prompt=LONG, max_tokens=128):
    """Fire ``n`` requests concurrently from a background thread; returns (thread, results)."""
    results = []

    async def run():
        async with httpx.AsyncClient(base_url=server.url, timeout=300) as c:
            rs = await asyncio.gather(
                *(
                    c.post(
                        "/v1/completions",
                        json={"model": server.runtime.model_name, "prompt": prompt, "max_tokens": max_tokens},
                    )
                    for _ in range(n)
                )
            )
            results.extend(rs)

    t = threading.Thread(target=lambda: asyncio.run(run()))
    t.start()
    return t, results


def test_killed_instance_actor_loses_no_request(cluster_server):
    server, rt = cluster_server, cluster_server.runtime
    before = instances(server)
    assert len(before) == 2
    thread, results = send_many(server, 6)
    # wait until requests are mid-decode on some instance, then kill its actor
    assert wait_until(
        lambda: (
            any(n for _, n in instances(server).values())
            and server.on_loop(lambda: sum(1 for h in rt.handles.values() if h.last_state is not None)) >= 2
        )
    )
    # the instance that has already stepped the most of them
    stepped_on = server.on_loop(lambda: [h.instances[-1] for h in rt.handles.values() if h.instances])
    victim = max(set(stepped_on), key=stepped_on.count)
    for handle in server.on_core(rt.backend.worker_handles, victim):
        ray.kill(handle, no_restart=True)
    thread.join(timeout=400)
    assert [r.status_code for r in results] == [200] * 6, [r.text for r in results if r.status_code != 200]
    infos = [r.json()["dilaserve"] for r in results]
    # the requests that were on the dead instance finished elsewhere, resuming from their last state
    resumed = [i for i in infos if victim in i["instances"]]
    assert resumed and all(i["instances"][-1] != victim for i in resumed)
    assert all(i["steps"] == len(i["thresholds"]) >= 1 for i in infos)
    assert victim not in instances(server)
    assert wait_until(lambda: len(instances(server)) == 2, 120), "a replacement instance starts"
    metrics = fetch_metrics(server.url)
    assert metrics["dilaserve:instance_failures_total"] == 1
    # the requests re-queued from the dead instance are counted as resumed
    assert metrics["dilaserve:resumed_requests_total"] >= len(resumed)


def test_live_reconfiguration_two_tp1_to_one_tp2(cluster_server):
    server, rt = cluster_server, cluster_server.runtime
    assert sorted(tp for tp, _ in instances(server).values()) == [1, 1]
    thread, results = send_many(server, 4)
    assert wait_until(lambda: server.on_core(lambda: rt.scheduler.in_flight) == 4)
    assert server.on_core(reconfigure_to, rt, [{2: 1}])
    thread.join(timeout=500)
    assert [r.status_code for r in results] == [200] * 4, [r.text for r in results if r.status_code != 200]
    assert wait_until(lambda: sorted(tp for tp, _ in instances(server).values()) == [2], 180)
    # the TP-2 instance (two gloo ranks) serves a new request end to end
    r = httpx.post(
        server.url + "/v1/completions", json={"model": rt.model_name, "prompt": LONG, "max_tokens": 128}, timeout=300
    )
    assert r.status_code == 200 and r.json()["dilaserve"]["instances"] == list(instances(server))
    info = r.json()["dilaserve"]
    assert info["steps"] == len(info["thresholds"]) >= 1
    metrics = fetch_metrics(server.url)
    assert metrics['dilaserve:instances{tp="2"}'] == 1 and metrics["dilaserve:reconfigurations_total"] == 1


def test_health_is_503_while_no_instance_is_ready(cluster_server):
    """Every worker killed (between steps, so only the liveness pings can tell): readiness
    turns 503 with the reason while liveness stays 200, and comes back with the replacements."""
    server, rt = cluster_server, cluster_server.runtime
    # whatever the cluster is now (two TP-1 or, after the live reconfiguration, one TP-2)
    settled = lambda: rt.scheduler.executor is None or rt.scheduler.executor.done  # noqa: E731
    assert wait_until(lambda: instances(server) and server.on_core(settled), 180)
    for victim in list(instances(server)):
        for handle in server.on_core(rt.backend.worker_handles, victim):
            ray.kill(handle, no_restart=True)
    seen = []

    def unready():
        r = httpx.get(server.url + "/health", timeout=5)
        if r.status_code == 503:
            seen.append((r.json(), httpx.get(server.url + "/health/live", timeout=5).status_code))
        return bool(seen)

    assert wait_until(unready, 60, 0.01), "readiness stayed 200 with every worker dead"
    body, live = seen[0]
    assert body["status"] == "unavailable" and "no instance is ready" in body["reason"] and not body["instances"]
    assert live == 200
    assert wait_until(lambda: httpx.get(server.url + "/health", timeout=5).status_code == 200, 240, 0.2)
