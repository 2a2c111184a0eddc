"""When a request reached the server: its SLO runs from there (docs/architecture.md, "The
burst, continued").

A client's SLO counts from when it sent the request. Before the engine core sees it, the
server accepts the connection, reads and parses the body and tokenises the prompt, and
under a burst on a busy machine that takes seconds: in ``bench burst --hog`` the 300
requests of the burst, sent at once, reached the core over 5.1 s. A deadline set when the
core sees the request would give the last of them 5 s more than their clients have, and
admission would promise what they cannot get. This ASGI middleware stamps each HTTP
request with the monotonic time the app first saw it (its headers parsed), before the body
is read, and the runtime dates the request's arrival and deadline from that stamp.
"""

from __future__ import annotations

import time

#: The key of ``scope["state"]`` (``request.state.received_at``) the stamp is kept under.
RECEIVED_AT = "received_at"


class StampReceived:
    """ASGI middleware: ``scope["state"]["received_at"]`` is ``time.monotonic()`` when the
    app was called with the request."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            scope.setdefault("state", {})[RECEIVED_AT] = time.monotonic()
        await self.app(scope, receive, send)


def waited_s(received_at: float | None) -> float:
    """Seconds since ``received_at`` (a ``time.monotonic()`` stamp; None: none, 0)."""
    return 0.0 if received_at is None else max(0.0, time.monotonic() - received_at)
