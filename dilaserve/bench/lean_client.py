"""A burst's sender: every request built before the burst starts, then sent at once as plain
HTTP/1.1 over its own connection (asyncio streams), each timed from the burst's start.

A load generator must not be the bottleneck it measures. Under ``bench burst --hog`` the
clients' process gets a share of a core, and an ``httpx`` client, which spends about a
millisecond of Python per request, put some of 300 requests on the wire 2.2-2.5 s after
their clock started: those were the requests that missed their SLO by the client's clock
and met it by the server's. Here a request costs a connect, one write and one read; what
is left between the client's clock and the server's is the network stack and the server's
own accept and parse, which count against it. ``httpx`` still sends the quiet spell, where
one request at a time costs nothing that matters.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Reply:
    """One request's answer: its HTTP status and body (``status`` 0 and the error in ``text``
    when no answer came), and the seconds from the burst's start to its last byte."""

    status: int
    text: str
    latency_s: float


def encode_post(url: str, path: str, body: dict, headers: dict[str, str] | None = None) -> bytes:
    """The bytes of ``POST path`` with ``body`` as JSON, closing the connection after."""
    host = urlsplit(url).netloc
    payload = json.dumps(body).encode()
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json"]
    lines += [f"Content-Length: {len(payload)}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def send_at_once(url: str, requests: list[bytes], timeout_s: float = 600.0) -> list[Reply]:
    """Send every one of ``requests`` (from :func:`encode_post`) at once, each on its own
    connection; the replies in the same order."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    t0 = time.perf_counter()

    async def one(raw: bytes) -> Reply:
        try:
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(raw)
                await writer.drain()
                status, text = await asyncio.wait_for(_read_response(reader), timeout_s)
            finally:
                writer.close()
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
            return Reply(0, f"{type(e).__name__}: {e}", time.perf_counter() - t0)
        return Reply(status, text, time.perf_counter() - t0)

    return list(await asyncio.gather(*(one(r) for r in requests)))


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, str]:
    """An HTTP/1.1 response's status and body (by ``Content-Length``, chunks, or to the end)."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    status = int(head[0].split(" ", 2)[1])
    fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
    if "content-length" in fields:
        body = await reader.readexactly(int(fields["content-length"]))
    elif fields.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(chunks)
    else:
        body = await reader.read()
    return status, body.decode("utf-8", "replace")
