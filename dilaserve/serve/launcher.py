"""Start and stop a ``python -m dilaserve.serve`` process from an app (the serving notebook,
``notebooks/serve_app.py``), a benchmark or a script; ``dilaserve.serve.client`` talks to it.

The server runs in its own subprocess and process group, so stopping it never touches the
caller; its log goes to a file (a pipe nobody reads would fill up and stall it). A server lives
as long as its handle: when the handle is garbage-collected (a notebook session's globals
cleared) or this interpreter exits, the server gets SIGTERM and shuts down on its own.

    server = start_server(extra_args=["--reconfig-interval-s", "0"])
    print(server.url, server.pid)
    server.stop()
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dilaserve.serve.client import answers_health
from dilaserve.utils.net import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ServerHandle:
    """A running (or stopped) server subprocess."""

    proc: subprocess.Popen
    port: int
    log_path: Path

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
        return answers_health(self.url)

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

    def stop(self, timeout_s: float = 60.0) -> int | None:
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


def serve_command(port: int, artifacts: str | None = None, extra_args: Sequence[str] = ()) -> list[str]:
    """The command line of the server: this interpreter, ``-m dilaserve.serve``, its flags."""
    cmd = [sys.executable, "-m", "dilaserve.serve", "--port", str(port)]
    if artifacts:
        cmd += ["--artifacts", str(artifacts)]
    return cmd + [str(a) for a in extra_args]


def start_server(
    port: int | None = None,
    artifacts: str | None = None,
    extra_args: Sequence[str] = (),
    wait: bool = True,
    timeout_s: float = 240.0,
    log_path: Path | None = None,
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
        proc = subprocess.Popen(
            serve_command(port, artifacts, extra_args),
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    handle = ServerHandle(proc, port, Path(log_path))
    if wait and not handle.wait_healthy(timeout_s):
        handle.stop()
        raise RuntimeError(
            f"the server on port {port} did not become healthy (exit code {proc.returncode}); "
            f"end of its log {log_path}:\n{handle.log_tail()}"
        )
    return handle
