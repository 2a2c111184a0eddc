"""Start, query and stop a ``python -m dilaserve.serve`` process from an app (the serving
notebook, ``notebooks/serve_app.py``) or a script.

The server runs in its own subprocess and process group, so stopping it never touches the
caller; its log goes to a file (a pipe nobody reads would fill up and stall it). A server lives
as long as its handle: when the handle is garbage-collected (a notebook session's globals
cleared) or this interpreter exits, the server gets SIGTERM and shuts down on its own.

    server = start_server(extra_args=["--reconfig-interval-s", "0"])
    reply = complete(server.url, "list : c a f b", max_tokens=32, slo_ms=5000)
    print(reply.text, reply.steps, reply.thresholds)
    print(fetch_metrics(server.url)["dilaserve:slo_attainment"])
    server.stop()
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerHandle:
    """A running (or stopped) server subprocess."""

    proc: subprocess.Popen
    port: int
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        # Holds the process, not the handle, so the handle can still be collected.
        self._finalizer = weakref.finalize(self, _terminate, self.proc)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def healthy(self) -> bool:
        if not self.alive:
            return False
        try:
            return httpx.get(self.url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_healthy(self, timeout_s: float = 240.0, poll_s: float = 0.5) -> bool:
        """Block until ``/health`` answers 200; False if the process died or time ran out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.healthy():
                return True
            if not self.alive:
                return False
            time.sleep(poll_s)
        return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 60.0) -> Optional[int]:
        """SIGTERM (the server drains in-flight requests and shuts its Ray cluster down), then
        SIGKILL to the server's own process group if it does not exit in time. Idempotent."""
        if self.alive:
            try:
                self.proc.send_signal(signal.SIGTERM)
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)  # the group this handle started
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=30)
        self._finalizer.detach()
        return self.proc.returncode


def _terminate(proc: subprocess.Popen) -> None:
    """Ask the server to shut down without waiting (runs at exit or on collection)."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass


def serve_command(port: int, artifacts: Optional[str] = None, extra_args: Sequence[str] = ()) -> list[str]:
    """The command line of the server: this interpreter, ``-m dilaserve.serve``, its flags."""
    cmd = [sys.executable, "-m", "dilaserve.serve", "--port", str(port)]
    if artifacts:
        cmd += ["--artifacts", str(artifacts)]
    return cmd + [str(a) for a in extra_args]


def start_server(
    port: Optional[int] = None, artifacts: Optional[str] = None, extra_args: Sequence[str] = (),
    wait: bool = True, timeout_s: float = 240.0, log_path: Optional[Path] = None,
) -> ServerHandle:
    """Launch the server; with ``wait``, block until it is healthy.

    Raises ``RuntimeError`` (with the end of the server's log) if it exits or stays unhealthy.
    The server is also told to stop when the handle is dropped or this interpreter exits, so a
    closed app leaves nothing behind.
    """
    port = port or free_port()
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix=f"dilaserve-serve-{port}-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(serve_command(port, artifacts, extra_args), cwd=REPO_ROOT, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    handle = ServerHandle(proc, port, Path(log_path))
    if wait and not handle.wait_healthy(timeout_s):
        handle.stop()
        raise RuntimeError(f"the server on port {port} did not become healthy (exit code {proc.returncode}); "
                           f"end of its log {log_path}:\n{handle.log_tail()}")
    return handle


@dataclass(frozen=True)
class Completion:
    """One answer, with what the server reports about how it was decoded."""

    text: str
    steps: int
    thresholds: list[float]
    latency_ms: float
    slo_ms: float
    slo_met: bool
    instances: list[str]


def complete(url: str, prompt: str, max_tokens: int = 32, slo_ms: Optional[float] = None,
             priority: int = 0, min_threshold: float = 0.0, model: str = "dila-tiny",
             timeout_s: float = 300.0) -> Completion:
    """POST ``/v1/completions`` and return the answer; raises ``RuntimeError`` with the
    server's error message on a non-200 reply."""
    body = {"model": model, "prompt": prompt, "max_tokens": int(max_tokens), "priority": int(priority),
            "min_threshold": float(min_threshold)}
    if slo_ms:
        body["slo_ms"] = float(slo_ms)
    r = httpx.post(url + "/v1/completions", json=body, timeout=timeout_s)
    if r.status_code != 200:
        try:
            msg = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = r.text
        raise RuntimeError(f"HTTP {r.status_code}: {msg}")
    d = r.json()
    info = d["dilaserve"]
    return Completion(d["choices"][0]["text"], int(info["steps"]), list(info["thresholds"]),
                      float(info["latency_ms"]), float(info["slo_ms"]), bool(info["slo_met"]),
                      list(info["instances"]))


def fetch_metrics(url: str, prefix: str = "dilaserve:") -> dict[str, float]:
    """Scrape ``/metrics``: every sample whose name starts with ``prefix``, keyed by name
    plus labels (``dilaserve:instances{tp="1"}``)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=5).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.startswith(prefix):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = float(s.value)
    return out
