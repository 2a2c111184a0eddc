"""The receipt stamp: an HTTP request is dated when the app first sees it."""

import asyncio
import time

from dilaserve.serve.received import RECEIVED_AT, StampReceived, waited_s


def test_the_middleware_stamps_http_requests_before_the_app_runs():
    seen = {}

    async def app(scope, receive, send):
        seen.update(scope.get("state", {}))

    before = time.monotonic()
    asyncio.run(StampReceived(app)({"type": "http"}, None, None))
    assert before <= seen[RECEIVED_AT] <= time.monotonic()
    # lifespan and websocket scopes pass through untouched
    seen.clear()
    asyncio.run(StampReceived(app)({"type": "lifespan"}, None, None))
    assert RECEIVED_AT not in seen


def test_waited_counts_from_the_stamp_and_never_backwards():
    assert waited_s(None) == 0.0
    assert 0.9 <= waited_s(time.monotonic() - 1.0) < 5.0
    assert waited_s(time.monotonic() + 10.0) == 0.0
