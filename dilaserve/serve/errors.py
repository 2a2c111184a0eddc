"""The errors the API reports to a client, each with its HTTP status and OpenAI error type.

The runtime raises them; :mod:`dilaserve.serve.api` turns them into an OpenAI-style error
body (``{"error": {"message", "type", "param", "code"}}``). ``param`` names the request
field at fault, given where the error is raised, never guessed from the message.
"""

from __future__ import annotations


class ServeError(Exception):
    """An error the API reports to the client with an HTTP status (and, for overload,
    a ``Retry-After`` hint in seconds)."""

    status = 500
    type = "server_error"
    #: Why it was refused, for ``dilaserve:rejected_requests_total{reason}``.
    reason = "error"

    def __init__(
        self, message: str, param: str | None = None, retry_after_s: float | None = None, reason: str | None = None
    ):
        super().__init__(message)
        self.param = param
        self.retry_after_s = retry_after_s
        if reason is not None:
            self.reason = reason


class BadRequest(ServeError):
    """The request itself is wrong; resending it unchanged fails again."""

    status, type, reason = 400, "invalid_request_error", "invalid_request"


class Overloaded(ServeError):
    """The request is fine but the server is too busy now; retry after ``retry_after_s``."""

    status, type, reason = 429, "rate_limit_error", "overloaded"


class Unavailable(ServeError):
    """The server cannot serve now (starting up, shutting down, no instance)."""

    status, type, reason = 503, "service_unavailable", "unavailable"


class PayloadTooLarge(ServeError):
    """The request body is over ``--max-request-bytes``; a smaller one may be served."""

    status, type, reason = 413, "invalid_request_error", "too_large"


class Unauthorized(ServeError):
    """The request lacks the server's API key (``--api-key``), or sends another one."""

    status, type, reason = 401, "invalid_request_error", "unauthorized"


class UnsupportedMediaType(ServeError):
    """The body is declared as something other than JSON."""

    status, type, reason = 415, "invalid_request_error", "media_type"
