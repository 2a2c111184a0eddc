"""Shutdown on SIGTERM or SIGINT: in-flight requests are drained (or failed cleanly) while the port
still answers, then the process exits cleanly."""

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
import ray

from dilaserve.serve.launcher import start_server
from dilaserve.utils.net import free_port
from tests.builders.waiting import wait_until
from tests.serve.server import LONG

pytestmark = [pytest.mark.timeout(600), pytest.mark.integration]  # server processes


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_drains_in_flight_requests_while_the_port_answers(ray_cluster, sig):
    """A signal with requests in flight: each of them is answered in full; until the last is,
    every request arriving gets a 503 that says so, with a Retry-After (the port still
    listens); then the process exits with status 0 and no traceback."""
    port = free_port()
    address = ray.get_runtime_context().gcs_address
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dilaserve.serve",
            "--port",
            str(port),
            "--ray-address",
            address,
            "--reconfig-interval-s",
            "0",
            # One instance, and (below) a quality floor of 1.0, so a step commits one token:
            # the drain outlasts the first probes on an idle machine too (without them the
            # answers came 0.4 s after the signal).
            "--num-slots",
            "1",
            "--slots-per-node",
            "1",
            "--tp-degrees",
            "1",
            "--thresholds",
            "0.5",
            "0.9",
            "1.0",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    n = 8
    try:
        assert wait_until(lambda: proc.poll() is not None or _healthy(url), 240, 0.5) and proc.poll() is None, (
            proc.stdout.read1().decode() if proc.poll() is not None else "not healthy"
        )
        box, answered_at = [], []

        def send():
            box.append(
                httpx.post(
                    url + "/v1/completions",
                    timeout=300,
                    json={"model": "dila-tiny", "prompt": LONG, "max_tokens": 192, "min_threshold": 1.0},
                )
            )
            answered_at.append(time.monotonic())

        threads = [threading.Thread(target=send) for _ in range(n)]
        for t in threads:
            t.start()
        assert wait_until(lambda: _running(url) == n, 60, 0.01), "the requests never got in flight"
        proc.send_signal(sig)
        signalled = time.monotonic()
        # Draining: until the last request in flight is answered, the port still answers, and
        # each new request is told the server is going away and when to retry.
        late = []  # (sent at, response or the connection error)
        while any(t.is_alive() for t in threads):
            sent = time.monotonic()
            try:
                late.append(
                    (
                        sent,
                        httpx.post(
                            url + "/v1/completions", timeout=60, json={"model": "dila-tiny", "prompt": "list : a"}
                        ),
                    )
                )
            except httpx.ConnectError as e:
                late.append((sent, e))
            time.sleep(0.05)
        for t in threads:
            t.join(timeout=300)
        assert [r.status_code for r in box] == [200] * n, [r.text for r in box if r.status_code != 200]
        assert all(r.json()["choices"][0]["finish_reason"] in ("stop", "length") for r in box)
        # The listener closes once the last response is written: a probe sent well before the
        # client read it (the margin covers the client's own reading) met an open port.
        before = [r for sent, r in late if sent < max(answered_at) - 0.5]
        assert before, (
            f"the in-flight requests ended {max(answered_at) - signalled:.2f} s after the signal, before the first probe"
        )
        for r in before:
            assert isinstance(r, httpx.Response), f"refused while requests were in flight: {r!r}"
            assert r.status_code == 503 and "shutting down" in r.json()["error"]["message"], r.text
            assert r.headers["retry-after"] == "1"
        assert proc.wait(timeout=120) == 0
        assert b"Traceback" not in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def _running(url):
    try:
        return httpx.get(url + "/health", timeout=2).json().get("running", 0)
    except (httpx.HTTPError, ValueError):
        return 0


def _healthy(url):
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_sigterm_to_the_whole_process_group_is_prompt_and_quiet():
    """A process manager stopping the job signals the server's group, its own Ray cluster
    included: the server must not wait on the dead cluster (teardown timeouts, then Ray's
    "Failed to connect to GCS within 60 seconds")."""
    server = start_server(extra_args=["--reconfig-interval-s", "0"], timeout_s=300)
    try:
        t0 = time.monotonic()
        os.killpg(server.pid, signal.SIGTERM)  # start_server gave the server its own group
        rc = server.proc.wait(timeout=120)
        elapsed = time.monotonic() - t0
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    assert elapsed < 30, f"took {elapsed:.0f}s to exit:\n{log[-2000:]}"
    assert rc in (0, 15, -15, 143)
    for noise in ("did not confirm", "Failed to connect to GCS", "Traceback"):
        assert noise not in log, log[-2000:]
