"""The HTTP API: OpenAI-compatible completions and chat completions, SSE streaming,
``/v1/models``, ``/health`` and Prometheus ``/metrics``.

With ``--admin-api`` (``ServeConfig.admin_api``; as vLLM's dev-mode endpoints, off by
default: it changes the cluster), ``POST /admin/reconfigure`` applies an operator's
configuration live, e.g. ``{"node_counts": [{"2": 1}]}`` for one TP-2 instance on node 0
(see :func:`~dilaserve.serve.control_setup.reconfigure_to`), and ``GET /admin/workers`` lists
each ready instance's worker process ids; ``bench chaos`` uses both.

With ``--api-key`` every ``/v1`` and admin route asks for the key (:mod:`dilaserve.serve.auth`);
``/health`` and ``/metrics`` stay open. A body must be declared as JSON (or not declared):
any other ``Content-Type`` gets a 415.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .auth import key_check
from .control_setup import reconfigure_to
from .errors import BadRequest, PayloadTooLarge, ServeError, Unauthorized, UnsupportedMediaType
from .protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DecodeInfo,
    Usage,
    error_body,
    new_id,
    now,
    parse_request,
)
from .received import RECEIVED_AT, StampReceived
from .responses import CompletionResult, RequestHandle
from .runtime import ServingRuntime

log = logging.getLogger(__name__)

#: Bodies larger than this are parsed and tokenised off the event loop: a 1 MiB prompt takes
#: tens of milliseconds to read, and every other request and /health would wait that long.
OFF_LOOP_BYTES = 64 * 1024

#: A body over the limit is still read (and dropped) up to this many times the limit, so the
#: client, which sends the whole body before it reads the answer, gets the 413 and not a
#: broken pipe; past that the connection is closed.
DRAIN_FACTOR = 64


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or a 413 once it is known to exceed ``limit`` bytes (by its
    Content-Length, or while a chunked body arrives)."""
    declared = request.headers.get("content-length")
    too_large = PayloadTooLarge(
        f"the request body is over the limit of {limit} bytes (--max-request-bytes): send a shorter prompt",
    )
    if declared is not None and declared.isdigit() and int(declared) > limit:
        if int(declared) <= limit * DRAIN_FACTOR:
            async for _ in request.stream():
                pass
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def check_json(request: Request) -> None:
    """A 415 unless the body is declared as JSON (``application/json`` or ``*+json``); a body
    with no declared type is read as JSON."""
    declared = request.headers.get("content-type")
    if declared is None:
        return
    media = declared.split(";", 1)[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise UnsupportedMediaType(
            f"the request body is declared as {media or 'an empty type'!r}, not JSON: "
            "send a JSON object with 'Content-Type: application/json'"
        )


def _body_schema(cls) -> dict:
    """The OpenAPI request body of an endpoint that parses its own body (see :func:`build_app`)."""
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": cls.model_json_schema(ref_template="#/components/schemas/{model}")}
            },
        }
    }


def _error(
    status: int,
    message: str,
    type_: str,
    param: str | None = None,
    retry_after_s: float | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    headers = dict(headers or {})
    if retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(retry_after_s)))
    return JSONResponse(error_body(message, type_, param, status), status_code=status, headers=headers or None)


def _usage(g: CompletionResult) -> dict:
    return Usage(
        prompt_tokens=g.prompt_tokens,
        completion_tokens=g.completion_tokens,
        total_tokens=g.prompt_tokens + g.completion_tokens,
    ).model_dump()


def _info(g: CompletionResult) -> dict:
    return DecodeInfo(
        steps=g.steps,
        thresholds=g.thresholds,
        latency_ms=round(g.latency_s * 1000, 1),
        slo_ms=round(g.slo_s * 1000, 1),
        slo_met=g.slo_met,
        instances=g.instances,
    ).model_dump()


def build_app(runtime: ServingRuntime, manage_lifecycle: bool = True) -> FastAPI:
    """The ASGI app; with ``manage_lifecycle`` the runtime starts and drains with the server."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if manage_lifecycle:
            await runtime.start()
        try:
            yield
        finally:
            if manage_lifecycle:
                await runtime.shutdown()

    app = FastAPI(title="DiLaServe", lifespan=lifespan)
    app.add_middleware(StampReceived)  # each request's SLO runs from when it reached the server
    #: On every /v1 and admin route: the API key, when the server has one.
    guard = [Depends(key_check(runtime.cfg.api_key))]

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        msg = first.get("msg", "invalid request")
        if first.get("type") == "json_invalid":
            msg = "the request body is not valid JSON"
        return _error(
            400, f"{'.'.join(loc) + ': ' if loc else ''}{msg}", "invalid_request_error", ".".join(loc) or None
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail), "invalid_request_error")

    @app.exception_handler(ServeError)
    async def _serve_error(request: Request, exc: ServeError):
        runtime.metrics.rejected.labels(exc.reason, str(exc.status)).inc()
        # RFC 9110: a 401 names the scheme the client should authenticate with.
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
        return _error(exc.status, str(exc), exc.type, exc.param, exc.retry_after_s, headers)

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect):
        # Nothing was queued for it and nobody is left to answer: worth a line, not a traceback.
        log.info("a client disconnected before its request body arrived (%s %s)", request.method, request.url.path)
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unexpected error while serving %s", request.url.path)
        return _error(500, f"internal error: {type(exc).__name__}", "server_error")

    @app.get("/health")
    async def health():
        """Readiness: 200 while the server takes requests and an instance is ready to run them
        ("degraded", with the reason, while the step loop stalls); 503 otherwise
        (:mod:`dilaserve.serve.health`)."""
        verdict = runtime.health()
        reason = {"reason": verdict.reason} if verdict.reason is not None else {}
        return JSONResponse({"status": verdict.status, **reason, **runtime.status()}, status_code=verdict.http_status)

    @app.get("/health/live")
    async def live():
        """Liveness: 200 while the process and its event loop run, ready or not."""
        return {"status": "alive"}

    @app.get("/metrics")
    async def metrics():
        return Response(runtime.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models", dependencies=guard)
    async def models():
        return {
            "object": "list",
            "data": [{"id": runtime.model_name, "object": "model", "created": now(), "owned_by": "dilaserve"}],
        }

    def _check_model(name: str) -> None:
        if name != runtime.model_name:
            raise BadRequest(
                f"unknown model {name!r}; this server serves {runtime.model_name!r} (see /v1/models)", "model"
            )

    def _parse_and_prepare(raw: bytes, cls):
        body = parse_request(raw, cls)
        _check_model(body.model)
        return body, runtime.prepare(body)

    async def _run(request: Request, chat: bool):
        check_json(request)
        runtime.check_accepting()
        raw = await read_body(request, runtime.cfg.max_request_bytes)
        cls = ChatCompletionRequest if chat else CompletionRequest
        if len(raw) > OFF_LOOP_BYTES:
            body, prepared = await asyncio.to_thread(_parse_and_prepare, raw, cls)
        else:
            body, prepared = _parse_and_prepare(raw, cls)
        handle = await runtime.submit(prepared, getattr(request.state, RECEIVED_AT, None))
        rid = new_id("chatcmpl" if chat else "cmpl")
        if body.stream:
            return StreamingResponse(_sse(request, handle, rid, chat), media_type="text/event-stream")
        gen = await _await_or_cancel(request, handle)
        if gen is None:
            return Response(status_code=499)
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": gen.text}, "finish_reason": gen.finish_reason}
            if chat
            else {"index": 0, "text": gen.text, "logprobs": None, "finish_reason": gen.finish_reason}
        )
        return {
            "id": rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": now(),
            "model": runtime.model_name,
            "choices": [choice],
            "usage": _usage(gen),
            "dilaserve": _info(gen),
        }

    async def _await_or_cancel(request: Request, handle: RequestHandle) -> CompletionResult | None:
        """Wait for the result; if the client disconnects first, free its slot."""
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(handle.done), timeout=0.5)
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    runtime.cancel(handle)
                    return None

    async def _sse(request: Request, handle: RequestHandle, rid: str, chat: bool) -> AsyncIterator[bytes]:
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, finish: str | None = None, extra: dict | None = None) -> bytes:
            if chat:
                delta = {"content": text} if text is not None else {}
                choice = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            payload = {
                "id": rid,
                "object": obj,
                "created": now(),
                "model": runtime.model_name,
                "choices": [choice],
                **(extra or {}),
            }
            return f"data: {json.dumps(payload)}\n\n".encode()

        try:
            if chat:
                yield chunk(None, extra=None).replace(b'"delta": {}', b'"delta": {"role": "assistant"}')
            while True:
                piece = await handle.chunks.get()
                if piece is None:
                    break
                yield chunk(piece)
            try:
                gen = await handle.done
            except ServeError as e:
                yield f"data: {json.dumps(error_body(str(e), e.type, e.param, e.status))}\n\n".encode()
            else:
                yield chunk(None if chat else "", gen.finish_reason, {"usage": _usage(gen), "dilaserve": _info(gen)})
            yield b"data: [DONE]\n\n"
        except asyncio.CancelledError:  # the client disconnected mid-stream
            runtime.cancel(handle)
            raise

    if runtime.cfg.admin_api:

        @app.get("/admin/workers", dependencies=guard)
        async def admin_workers():
            """Each ready instance's Ray worker process ids (for fault injection: ``bench chaos``)."""
            return {"worker_pids": (runtime.core.snapshot.worker_pids or {}) if runtime.core else {}}

        @app.post("/admin/reconfigure", dependencies=guard)
        async def admin_reconfigure(request: Request):
            check_json(request)
            try:
                body = json.loads(await read_body(request, runtime.cfg.max_request_bytes))
            except ValueError:
                raise BadRequest("the request body is not valid JSON") from None
            counts = body.get("node_counts") if isinstance(body, dict) else None
            if not isinstance(counts, list) or not all(isinstance(nc, dict) for nc in counts):
                raise BadRequest('send {"node_counts": [{"TP": COUNT, ...} per node]}, e.g. [{"2": 1}]', "node_counts")
            try:
                parsed = [{int(tp): int(n) for tp, n in nc.items()} for nc in counts]
                accepted = await asyncio.wrap_future(runtime.core.call(reconfigure_to, runtime, parsed))
            except (TypeError, ValueError) as e:
                raise BadRequest(str(e), "node_counts") from None
            if not accepted:
                return _error(409, "a reconfiguration is still executing; retry when it is done", "conflict")
            return {"accepted": True, "node_counts": counts}

    # The two endpoints read their own body (size limit, parsing off the loop when large), so
    # FastAPI is told their schemas; the schemas' shared definitions go to the components.
    @app.post("/v1/completions", openapi_extra=_body_schema(CompletionRequest), dependencies=guard)
    async def completions(request: Request):
        return await _run(request, chat=False)

    @app.post("/v1/chat/completions", openapi_extra=_body_schema(ChatCompletionRequest), dependencies=guard)
    async def chat_completions(request: Request):
        return await _run(request, chat=True)

    default_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = default_openapi()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for cls in (CompletionRequest, ChatCompletionRequest):
                full = cls.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(full.pop("$defs", {}))
            for path in ("/v1/completions", "/v1/chat/completions"):
                body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
                body.pop("$defs", None)
        return app.openapi_schema

    app.openapi = openapi
    return app
