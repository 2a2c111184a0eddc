"""The server in the benchmark's own process, for benchmarks that look inside it: its HTTP
event loop (:class:`StallProbe`) and its engine core (``runtime.core.call``).

The app runs on a uvicorn thread, the engine core on its own thread, the instances in Ray
worker processes, as ``python -m dilaserve.serve`` runs them.
"""

from __future__ import annotations

import asyncio
import threading
import time

import uvicorn

from dilaserve.serve.api import build_app
from dilaserve.serve.client import answers_health
from dilaserve.serve.config import ServeConfig
from dilaserve.serve.runtime import ServingRuntime
from dilaserve.utils.cli import build_dataclass
from dilaserve.utils.net import bound_socket


class InProcessServer:
    """The server's app on a uvicorn thread of this process, so the bench can reach its loops."""

    def __init__(self, **overrides):
        # Held from here on: Ray, started with the app, cannot take the port meanwhile.
        self.socket = bound_socket("127.0.0.1", 0)
        self.port = int(self.socket.getsockname()[1])
        self.cfg = build_dataclass(ServeConfig, {"port": self.port, **overrides})
        self.runtime = ServingRuntime(self.cfg)
        config = uvicorn.Config(build_app(self.runtime), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name="http", daemon=True
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 300) -> InProcessServer:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if answers_health(self.url):
                return self
            if not self.thread.is_alive():
                raise RuntimeError("the server thread died during start-up")
            time.sleep(0.2)
        raise TimeoutError("the server did not become healthy")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=120)


class StallProbe:
    """A task on the HTTP loop that sleeps ``every_s`` and records how late it wakes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, every_s: float = 0.005):
        self.every_s = every_s
        self.stalls: list[float] = []
        #: (seconds since the probe started, stall) of the longest stall seen.
        self.worst: tuple[float, float] = (0.0, 0.0)
        self._t0 = time.perf_counter()
        self._stop = False
        self._fut = asyncio.run_coroutine_threadsafe(self._run(), loop)

    async def _run(self) -> None:
        while not self._stop:
            t0 = time.perf_counter()
            await asyncio.sleep(self.every_s)
            stall = time.perf_counter() - t0 - self.every_s
            self.stalls.append(stall)
            if stall > self.worst[1]:
                self.worst = (round(t0 - self._t0, 1), stall)

    def take(self) -> list[float]:
        out, self.stalls = self.stalls, []
        return out

    def stop(self) -> None:
        self._stop = True
        self._fut.result(timeout=10)
