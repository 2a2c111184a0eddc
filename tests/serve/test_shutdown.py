"""Shutdown on SIGTERM: in-flight requests are drained (or failed cleanly), then the process exits."""

import os
import re
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
    try:
        assert wait_until(lambda: _healthy(url), 240, 0.5), (
            proc.stdout.read1().decode() if proc.poll() is not None else "not healthy"
        )
        box = []
        t = threading.Thread(
            target=lambda: box.append(
                httpx.post(
                    url + "/v1/completions", timeout=300, json={"model": "dila-tiny", "prompt": LONG, "max_tokens": 128}
                )
            )
        )
        t.start()
        # signal once the request is in flight (the gauge counts it from its placement)
        assert wait_until(lambda: _running(url) >= 1, 60, 0.1), "the request never reached an instance"
        proc.send_signal(signal.SIGTERM)
        t.join(timeout=300)
        # uvicorn re-raises the signal after its graceful shutdown: exit by SIGTERM, not a crash
        assert proc.wait(timeout=120) in (0, 15, -15, 143)
        assert b"Traceback" not in proc.stdout.read()
        assert box and box[0].status_code in (200, 503)
        if box[0].status_code == 503:
            assert "shutting down" in box[0].json()["error"]["message"]
    finally:
        if proc.poll() is None:
            proc.kill()


def _running(url) -> float:
    """Requests placed on an instance, from the server's metrics (0 when it cannot answer)."""
    try:
        text = httpx.get(url + "/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0.0
    m = re.search(r"^dilaserve:num_requests_running (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


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
