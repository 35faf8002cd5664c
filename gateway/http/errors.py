"""Every error, rendered once, in the envelope of the protocol its request speaks (each
protocol registers its own: gateway/http/protocols.py)."""

from __future__ import annotations

import math
import traceback
from typing import NamedTuple

import msgspec
from litestar import Litestar, Request, Response
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException, ValidationException

from engines import errors as e
from engines.log import bound, emit
from gateway.http.protocols import Envelope, Protocol, Protocols
from gateway.logs.setup import current_redactor
from schemas.events import InternalError

# Each class of the tree (engines/errors.py) as HTTP sees it: its status and the `type`
# OpenAI's envelope gives it. A subclass not listed takes its nearest listed ancestor's.
RENDERING: dict[type[e.GatewayError], tuple[int, str]] = {
    e.BadRequest: (400, "invalid_request_error"),
    e.Unauthorized: (401, "authentication_error"),
    e.Forbidden: (403, "permission_error"),
    e.ModelNotFound: (404, "not_found_error"),
    e.StoredNotFound: (404, "invalid_request_error"),  # OpenAI's type for a missing response
    e.StoreUnavailable: (503, "server_error"),
    e.ModelBusy: (409, "conflict"),
    e.NotCancellable: (409, "invalid_request_error"),
    e.PayloadTooLarge: (413, "invalid_request_error"),
    e.BodyTimeout: (408, "invalid_request_error"),
    e.UnsupportedMediaType: (415, "invalid_request_error"),
    e.QueueFull: (429, "rate_limit_error"),
    e.RateLimited: (429, "rate_limit_error"),
    e.QueueTimeout: (503, "overloaded_error"),
    # Not "overloaded": clients back off and retry an overload for as long as it lasts, and a
    # model that failed to load will not come back by waiting.
    e.ModelUnavailable: (503, "server_error"),
    e.ToolCallRefused: (502, "invalid_tool_call"),
    e.ConstraintViolated: (400, "invalid_request_error"),
    e.DownloadFailed: (502, "server_error"),
    e.UpstreamError: (502, "bad_gateway"),
    e.UpstreamUnavailable: (503, "overloaded_error"),
    e.UpstreamTimeout: (504, "timeout_error"),
    # OpenAI's status for an MCP server whose tools could not be listed: 424 Failed Dependency.
    e.McpServerUnavailable: (424, "external_connector_error"),
    e.ClientGone: (499, "client_closed_request"),
    e.ConfigInvalid: (400, "invalid_request_error"),
    e.ContextTooLarge: (503, "server_error"),
    e.GatewayError: (500, "server_error"),
}


class Rendered(NamedTuple):
    status: int
    message: str
    kind: str  # the gateway's word for the error (OpenAI's `type` spelling, as RENDERING)


def render(error: Exception) -> Rendered:
    """Status, client-facing message and kind of any exception: a gateway error as
    its class says; anything else a generic 500 that tells the client no internals."""
    if not isinstance(error, e.GatewayError):
        return Rendered(500, "internal error", "server_error")
    for cls in type(error).__mro__:
        if cls in RENDERING:
            status, kind = RENDERING[cls]
            return Rendered(status, error.message, kind)
    raise AssertionError("unreachable: GatewayError is in RENDERING")


# Statuses a retry can change: a timeout, a conflict that ends, a full queue, a server hiccup.
RETRYABLE_STATUSES = {408, 409, 429}
# Server-side errors that a retry cannot fix: the same prompt fails the same checks, the
# same script breaks the same constraint.
NOT_RETRYABLE = (e.ToolCallRefused, e.ConstraintViolated)


def should_retry(status: int, error: Exception | None = None) -> str | None:
    """The `x-should-retry` header's value: "false" where a retry cannot change the answer.

    The OpenAI and Anthropic SDKs retry 408/409/429 and every 5xx twice unless told not
    to; a request the gateway refused as written, a tool call its model got wrong past
    the guardrails (a 502 that would cost two more generations), or a script with no
    reply its constraint allows (a 400), fails the same way again.
    """
    if isinstance(error, NOT_RETRYABLE):
        return "false"
    if 400 <= status < 500 and status not in RETRYABLE_STATUSES:
        return "false"
    return None


def protocols_of(app: Litestar) -> Protocols:
    """The protocols the app registered (gateway/app.py)."""
    return app.state.protocols


def protocol_of(request: ASGIConnection) -> Protocol:
    """The protocol a request speaks, whose envelope its errors are written in."""
    return protocols_of(request.app).of(request.url.path, request.headers)


def raw_error(status: str, message: str, envelope: Envelope, *, retry: bool = False) -> bytes:
    """A whole HTTP/1.1 error response in `envelope` (the default protocol's), closing the
    connection: for the refusals made below the ASGI app (a head too large or malformed, too
    many connections, a head too slow), where no route says which protocol the client
    speaks."""
    code = int(status.split()[0])
    body = msgspec.json.encode(envelope(code, message, None))
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n"
        + ("retry-after: 1\r\n" if retry else "")
        + f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


def error_response(request: Request, error: Exception) -> Response:
    """One app-wide exception handler: status, headers and body from the error's kind."""
    headers: dict[str, str] = {}
    if isinstance(error, e.GatewayError):
        status, message, kind = render(error)
        if error.retry_after is not None:
            headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
    elif isinstance(error, ValidationException):
        status, kind = 400, "invalid_request_error"
        message = _validation_message(error)
    elif isinstance(error, HTTPException):
        status, message, kind = error.status_code, error.detail, None
        headers.update(error.headers or {})  # a 405's `Allow`, for one
    else:
        status, message, kind = 500, unexpected(error, _where(request)), "server_error"
    if should_retry(status, error):
        headers["x-should-retry"] = "false"
    protocol = protocol_of(request)
    if isinstance(error, e.RateLimited):
        headers |= protocols_of(request.app).allowance_headers(
            protocol, error.requests, error.tokens
        )
    if isinstance(error, e.GatewayError):
        message = protocol.wording(error, message)
    message = current_redactor().redact(message)  # an error body never echoes a key back
    # The event log gets the real cause; the client gets no internals.
    logged = message if status != 500 else f"internal error: {error!r}"
    request.scope.setdefault("state", {})["error"] = logged
    body = protocol.envelope(status, message, kind)
    return Response(body, status_code=status, headers=headers)


def stream_failure(request: Request, error: Exception) -> tuple[int, str, str]:
    """A failure after the 200 went out, as (status, message, kind) for the protocol's own
    in-stream error; recorded so `request_finished` carries the error and a failing status.

    Any exception counts, not only the gateway's own: an engine fault mid-stream must end
    the stream with an error the client can see, never cut it short as if it had finished.
    """
    status, message, kind = render(error)
    message = current_redactor().redact(message)
    logged = message if isinstance(error, e.GatewayError) else f"internal error: {error!r}"
    if not isinstance(error, e.GatewayError):
        message = unexpected(error, _where(request))
    state = request.scope.setdefault("state", {})
    state["error"] = f"mid-stream: {logged}"
    state["failed_status"] = status  # the 200 is out; the summary line says what happened
    return status, message, kind


def unexpected(error: BaseException, where: str) -> str:
    """Log an unexpected exception once, with its traceback (the redactor hides secrets in
    it, as in every line); return the generic message a client gets in its place."""
    emit(
        InternalError(
            where=where,
            type=f"{type(error).__module__}.{type(error).__qualname__}",
            message=str(error),
            traceback="".join(traceback.format_exception(error)),
        ),
        level="error",
    )
    request_id = bound().get("request_id")
    if request_id is None:
        return "internal error"
    return f"internal error (request id {request_id}); the gateway's log has the details"


def _where(request: Request) -> str:
    return f"{request.method} {request.url.path}"


def _validation_message(error: ValidationException) -> str:
    """litestar's decoding error, with msgspec's precise reason where it has one."""
    extra = error.extra if isinstance(error.extra, list) else []
    reasons = [
        str(item.get("message", item)) if isinstance(item, dict) else str(item) for item in extra
    ]
    return "; ".join([error.detail, *reasons]) if reasons else error.detail
