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

    def __init__(self, message: str, param: str | None = None, retry_after_s: float | None = None):
        super().__init__(message)
        self.param = param
        self.retry_after_s = retry_after_s


class BadRequest(ServeError):
    """The request itself is wrong; resending it unchanged fails again."""

    status, type = 400, "invalid_request_error"


class Overloaded(ServeError):
    """The request is fine but the server is too busy now; retry after ``retry_after_s``."""

    status, type = 429, "rate_limit_error"


class Unavailable(ServeError):
    """The server cannot serve now (starting up, shutting down, no instance)."""

    status, type = 503, "service_unavailable"


class PayloadTooLarge(ServeError):
    """The request body is over ``--max-request-bytes``; a smaller one may be served."""

    status, type = 413, "invalid_request_error"
