"""Run the real server (uvicorn + runtime + Ray instances) on loopback in a thread."""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time

import httpx
import uvicorn

from dilaserve.serve.api import build_app
from dilaserve.serve.config import ServeConfig
from dilaserve.serve.runtime import ServingRuntime
from dilaserve.utils.cli import build_dataclass
from dilaserve.utils.net import free_port

#: A prompt whose answer takes many steps: it is still in flight when a test acts on it.
LONG = "arith : + 1 - 1 : zero one two three four five six seven"


def instances(server: LiveServer) -> dict[str, tuple[int, int]]:
    """Ready instances of a live server: id -> (TP degree, requests on it)."""
    rt = server.runtime
    return server.on_core(
        lambda: {
            rt.scheduler.pool.ids[s]: (int(rt.scheduler.pool.tp[s]), len(rt.scheduler.pool.members[s]))
            for s in range(len(rt.scheduler.pool.ids))
            if rt.scheduler.pool.ids[s] and rt.scheduler.pool.ready[s]
        }
    )


class LiveServer:
    def __init__(self, **overrides):
        self.port = free_port()
        # No pipeline artifacts, as on a fresh clone: the server measures its profile at start-up.
        overrides.setdefault("artifacts", tempfile.mkdtemp(prefix="no-artifacts-"))
        # Settings by flag name (reconfig_interval_s=0), as on the command line.
        self.cfg = build_dataclass(ServeConfig, {"port": self.port, **overrides})
        self.runtime = ServingRuntime(self.cfg)
        config = uvicorn.Config(build_app(self.runtime), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 240) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if not self.thread.is_alive():
                raise RuntimeError("the server thread died during start-up")
            time.sleep(0.2)
        raise TimeoutError("server did not become healthy")

    def on_loop(self, fn, *args):
        """Run ``fn(*args)`` on the server's HTTP event loop (the front end: its request
        handles) and return its result."""

        async def call():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self.runtime.loop).result(timeout=30)

    def on_core(self, fn, *args):
        """Run ``fn(*args)`` on the engine core's loop (the scheduler, its pool, the backend)."""
        return self.runtime.core.call(fn, *args).result(timeout=30)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=120)
