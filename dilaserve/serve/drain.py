"""A uvicorn server that drains before it closes its listening sockets.

uvicorn answers SIGINT/SIGTERM by closing its listeners at once and then waiting for open
connections: a client arriving during the drain gets a refused connection, which no HTTP
client reads as "try another replica". :class:`DrainingServer` keeps listening while the
runtime drains: new requests get a 503 (``Unavailable``, "shutting down"), in-flight ones
finish, and only then (or after ``--drain-timeout-s``, or when no instance is left to finish
them) does uvicorn's own shutdown run. A second SIGINT still forces the exit.
"""

from __future__ import annotations

import time

import uvicorn

from .runtime import ServingRuntime


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, runtime: ServingRuntime):
        super().__init__(config)
        self.runtime = runtime
        self._drain_deadline: float | None = None

    def handle_exit(self, sig, frame) -> None:
        if self._drain_deadline is None and self.runtime.started:
            self._captured_signals.append(sig)  # re-raised after the shutdown, as uvicorn does
            self.runtime.accepting = False  # from now on a new request gets a 503
            self._drain_deadline = time.monotonic() + self.runtime.cfg.drain_timeout_s
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self._drain_deadline is not None and not self.should_exit and self.runtime.drained(self._drain_deadline):
            self.should_exit = True
        return await super().on_tick(counter)
