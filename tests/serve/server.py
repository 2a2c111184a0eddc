"""Run the real server (uvicorn + runtime + Ray instances) on loopback in a thread."""

from __future__ import annotations

import asyncio
import tempfile

from dilaserve.bench.inprocess import InProcessServer

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


class LiveServer(InProcessServer):
    """The benchmarks' in-process server, started as on a fresh clone, with hooks onto its
    two loops for the tests."""

    def __init__(self, **overrides):
        # No pipeline artifacts, as on a fresh clone: the server measures its profile at start-up.
        overrides.setdefault("artifacts", tempfile.mkdtemp(prefix="no-artifacts-"))
        # Settings by flag name (reconfig_interval_s=0), as on the command line.
        super().__init__(**overrides)

    def on_loop(self, fn, *args):
        """Run ``fn(*args)`` on the server's HTTP event loop (the front end: its request
        handles) and return its result."""

        async def call():
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self.runtime.loop).result(timeout=30)

    def on_core(self, fn, *args):
        """Run ``fn(*args)`` on the engine core's loop (the scheduler, its pool, the backend)."""
        return self.runtime.core.call(fn, *args).result(timeout=30)
