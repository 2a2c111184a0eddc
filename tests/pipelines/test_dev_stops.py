"""``python -m pipelines dev`` started as a shell starts a background job (SIGINT ignored)
stops, webserver, daemon and code server included, within 10 s of SIGTERM or SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from dilaserve.utils.net import free_port

REPO = Path(__file__).resolve().parents[2]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what `cmd &` does in a non-interactive shell


def _serving(url: str) -> bool:
    try:
        return httpx.get(url + "/server_info", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.integration  # starts the Dagster webserver, daemon and code server
@pytest.mark.timeout(420)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_dev_stops_within_10_s(sig, tmp_path):
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    log = open(tmp_path / "dev.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipelines", "dev", "-p", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        preexec_fn=_ignore_sigint,
    )
    try:
        deadline = time.monotonic() + 300
        while not _serving(f"http://127.0.0.1:{port}") and time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "dev.log").read_text()[-3000:]
            time.sleep(1)
        assert _serving(f"http://127.0.0.1:{port}"), (tmp_path / "dev.log").read_text()[-3000:]
        family = psutil.Process(proc.pid).children(recursive=True)
        assert any("dagster_webserver" in " ".join(p.cmdline()) for p in family)
        t0 = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=15)
        waited = time.monotonic() - t0
        assert waited < 10, f"exited {waited:.1f} s after {sig.name}"
        _, alive = psutil.wait_procs(family, timeout=max(0.1, 10 - waited))
        assert not alive, f"still running after {sig.name}: {[p.cmdline()[:4] for p in alive]}"
        assert proc.returncode == 0, (tmp_path / "dev.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
