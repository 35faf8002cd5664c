"""Every error, rendered once per protocol in that protocol's own envelope."""

from __future__ import annotations

import math

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException

from engines.errors import GatewayError
from gateway.logging import REDACTOR

OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
    503: "overloaded_error",
}


ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}


def protocol_of(path: str) -> str:
    """Which protocol's envelope an error on `path` is written in."""
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/api/"):
        return "ollama"
    return "openai"


def error_body(protocol: str, status: int, message: str, kind: str | None = None) -> dict:
    """The error envelope of `protocol`: OpenAI's, Anthropic's or Ollama's."""
    if protocol == "anthropic":
        kind = ANTHROPIC_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    if protocol == "ollama":
        return {"error": message}
    kind = kind or OPENAI_TYPES.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def error_response(request: Request, error: Exception) -> Response:
    """One app-wide exception handler: status, headers and body from the error's kind."""
    headers: dict[str, str] = {}
    if isinstance(error, GatewayError):
        status, message, kind = error.status, error.message, error.kind
        if error.retry_after is not None:
            headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
    elif isinstance(error, ValidationException):
        status, kind = 400, "invalid_request_error"
        message = _validation_message(error)
    elif isinstance(error, HTTPException):
        status, message, kind = error.status_code, error.detail, None
    else:
        status, message, kind = 500, "internal error", "server_error"
    message = REDACTOR.redact(message)  # an error body never echoes a key back
    # The event log gets the real cause; the client gets no internals.
    logged = message if status != 500 else f"internal error: {error!r}"
    request.scope.setdefault("state", {})["error"] = logged
    body = error_body(protocol_of(request.url.path), status, message, kind)
    return Response(body, status_code=status, headers=headers)


def _validation_message(error: ValidationException) -> str:
    """litestar's decoding error, with msgspec's precise reason where it has one."""
    extra = error.extra if isinstance(error.extra, list) else []
    reasons = [
        str(item.get("message", item)) if isinstance(item, dict) else str(item) for item in extra
    ]
    return "; ".join([error.detail, *reasons]) if reasons else error.detail
