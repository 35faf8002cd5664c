"""How OpenAI's clients hear an error and a key's allowance: its error envelope and its
`x-ratelimit-*` headers. OpenAI's is the default protocol: its envelope answers every path
no other protocol claims (ops, admin, a path no route matches)."""

from __future__ import annotations

import math

from engines.errors import Allowance
from gateway.http.protocols import Protocol

TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
    503: "overloaded_error",
}


def envelope(status: int, message: str, kind: str | None = None) -> dict:
    """OpenAI's error body."""
    kind = kind or TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def go_duration(seconds: float) -> str:
    """OpenAI's reset format: "20ms", "1s", "6m0s", "1h0m0s"."""
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def allowance_headers(name: str, allowance: Allowance) -> dict[str, str]:
    """`x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, reset as a Go duration."""
    limit, remaining, reset = allowance
    return {
        f"x-ratelimit-limit-{name}": str(limit),
        f"x-ratelimit-remaining-{name}": str(remaining),
        f"x-ratelimit-reset-{name}": go_duration(reset),
    }


PROTOCOL = Protocol("openai", envelope, allowance_headers)
