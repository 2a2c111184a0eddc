"""A uvicorn server that drains before it closes its listening sockets.

uvicorn answers SIGINT/SIGTERM by closing its listeners at once and then waiting for open
connections: a client arriving during the drain gets a refused connection, which no HTTP
client reads as "try another replica". :class:`DrainingServer` keeps listening while the
runtime drains: new requests get a 503 (``Unavailable``, "shutting down", with a
``Retry-After``), in-flight ones finish and their responses are written, and only then (or
after ``--drain-timeout-s``, or when no instance is left to finish them) does uvicorn's own
shutdown run. A second SIGINT still forces the exit.

uvicorn raises the signal again once it has shut down. For SIGINT that lands in asyncio's own
handler, which cancels the main task: a ``CancelledError`` -> ``KeyboardInterrupt`` traceback
after a shutdown that went as asked (and for SIGTERM a death by signal). The server does not:
a drained shutdown is a clean exit, status 0.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import uvicorn

from .runtime import ServingRuntime


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, runtime: ServingRuntime):
        super().__init__(config)
        self.runtime = runtime
        self._drain_deadline: float | None = None

    def handle_exit(self, sig, frame) -> None:
        if self._drain_deadline is None and self.runtime.started:
            self.runtime.accepting = False  # from now on a new request gets a 503
            self._drain_deadline = time.monotonic() + self.runtime.cfg.drain_timeout_s
            return
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            try:
                yield
            finally:
                self._captured_signals.clear()  # handled: nothing to raise again

    async def on_tick(self, counter: int) -> bool:
        if self._drain_deadline is not None and not self.should_exit:
            # A request whose outcome is known may still be writing its response (its handler
            # task runs): its client is not answered until that ends.
            answering = any(not t.done() for t in self.server_state.tasks)
            if self.runtime.drained(self._drain_deadline, answering):
                self.should_exit = True
        return await super().on_tick(counter)
