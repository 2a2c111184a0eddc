"""The API key check (``--api-key``), as OpenAI clients send the key: ``Authorization: Bearer KEY``.

The API puts :func:`key_check` on every ``/v1`` route and the admin routes; ``/health`` and
``/metrics`` stay open, for probes and scrapers that hold no key.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from fastapi import Request

from .errors import Unauthorized


def key_check(key: str | None) -> Callable[[Request], Awaitable[None]]:
    """A FastAPI dependency that refuses (401) a request that does not send ``key``; with
    ``key`` None every request passes."""
    expected = key.encode() if key is not None else None

    async def check(request: Request) -> None:
        if expected is None:
            return
        header = request.headers.get("authorization")
        if header is None:
            raise Unauthorized("no API key: send the header 'Authorization: Bearer KEY' (the server's --api-key)")
        scheme, _, token = header.partition(" ")
        # compare_digest: the time taken does not tell how much of a guessed key was right
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
            raise Unauthorized("the API key is not valid for this server: send 'Authorization: Bearer KEY'")

    return check
