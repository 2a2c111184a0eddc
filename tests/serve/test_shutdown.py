"""Shutdown on SIGTERM: in-flight requests are drained (or failed cleanly), then the process exits."""

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


def test_sigterm_drains_in_flight_requests(ray_cluster):
    """SIGTERM with requests in flight: each of them is answered in full, a request arriving
    during the drain gets a 503 that says so (the port still listens), then the process exits."""
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
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    n = 6
    try:
        assert wait_until(lambda: _healthy(url), 240, 0.5), (
            proc.stdout.read1().decode() if proc.poll() is not None else "not healthy"
        )
        box = []

        def send():
            box.append(
                httpx.post(
                    url + "/v1/completions", timeout=300, json={"model": "dila-tiny", "prompt": LONG, "max_tokens": 128}
                )
            )

        threads = [threading.Thread(target=send) for _ in range(n)]
        for t in threads:
            t.start()
        assert wait_until(lambda: _running(url) == n, 60, 0.01), "the requests never got in flight"
        proc.send_signal(signal.SIGTERM)
        # Draining: the port still answers, and a new request is told the server is going away.
        late = httpx.post(url + "/v1/completions", timeout=60, json={"model": "dila-tiny", "prompt": "list : a"})
        assert late.status_code == 503 and "shutting down" in late.json()["error"]["message"], late.text
        for t in threads:
            t.join(timeout=300)
        # uvicorn re-raises the signal after its graceful shutdown: exit by SIGTERM, not a crash
        assert proc.wait(timeout=120) in (0, 15, -15, 143)
        assert b"Traceback" not in proc.stdout.read()
        assert [r.status_code for r in box] == [200] * n, [r.text for r in box if r.status_code != 200]
        assert all(r.json()["choices"][0]["finish_reason"] in ("stop", "length") for r in box)
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
