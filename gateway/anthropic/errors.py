"""How Anthropic's clients hear an error and a key's allowance: its error envelope, its
wording of a prompt too long, its `anthropic-ratelimit-*` headers; and which requests are
its (`/v1/messages`, and `/v1/models` from a client that sends `anthropic-version`)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from engines.errors import Allowance, ContextOverflow, GatewayError
from gateway.http.protocols import Protocol, Protocols

VERSION_HEADER = "anthropic-version"
TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}


def envelope(status: int, message: str, kind: str | None = None) -> dict:
    """Anthropic's error body; a fault (`server_error`) is an `api_error` whatever its
    status, never an overload."""
    if kind == "server_error":
        kind = "api_error"
    else:
        kind = TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def wording(error: GatewayError, message: str) -> str:
    """Anthropic's own wording first: Claude Code reads `prompt is too long: N tokens > W
    maximum` to know the prompt, not the request, is at fault (and to compact)."""
    if not isinstance(error, ContextOverflow):
        return message
    return f"prompt is too long: {error.prompt_tokens} tokens > {error.window} maximum; {message}"


def allowance_headers(name: str, allowance: Allowance) -> dict[str, str]:
    """`anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`, reset as an RFC 3339
    time."""
    limit, remaining, reset = allowance
    at = datetime.now(UTC) + timedelta(seconds=math.ceil(reset))
    prefix = f"anthropic-ratelimit-{name}"
    return {
        f"{prefix}-limit": str(limit),
        f"{prefix}-remaining": str(remaining),
        f"{prefix}-reset": at.replace(microsecond=0).isoformat().replace("+00:00", "Z"),
    }


PROTOCOL = Protocol("anthropic", envelope, allowance_headers, wording, (VERSION_HEADER,))


def register(protocols: Protocols) -> None:
    """`/v1/messages` is Anthropic's; `/v1/models` serves OpenAI's clients too, and is
    Anthropic's for a client that says so with `anthropic-version`."""
    protocols.register(PROTOCOL, "/v1/messages", with_header=(VERSION_HEADER, "/v1/models"))
