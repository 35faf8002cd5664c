"""A key's 429 with the rate-limit headers each protocol's clients read, and the request's
priority from its `x-gateway-priority` header.

OpenAI sends `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (reset as a Go
duration, "6m0s"); Anthropic `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`
(reset as an RFC 3339 time). Ollama has none of its own: its clients get OpenAI's.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from litestar.connection import ASGIConnection

from engines.errors import Allowance, BadRequest, RateLimited
from schemas.config import KeyPriority

PRIORITY_HEADER = "x-gateway-priority"
LOWEST, HIGHEST = -100, 100  # schemas/config.py's `Priority`


def asked_priority(connection: ASGIConnection, key: KeyPriority | None) -> int:
    """The request's priority: as its header asks, at most the key's `max` (any, without
    keys), else the key's `default` (0 without keys). A malformed header is a 400."""
    default, ceiling = (key.default, key.max) if key else (0, HIGHEST)
    value = connection.headers.get(PRIORITY_HEADER)
    if value is None:
        return default
    try:
        asked = int(value.strip())
    except ValueError:
        asked = None
    if asked is None or not LOWEST <= asked <= HIGHEST:
        raise BadRequest(
            f"{PRIORITY_HEADER} is {value!r}: send an integer from {LOWEST} to {HIGHEST}"
        )
    return min(asked, max(ceiling, default))


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


def rate_limit_headers(protocol: str, error: RateLimited) -> dict[str, str]:
    """The headers of a key's 429 in `protocol`'s spelling."""
    return allowance_headers(protocol, error.requests, error.tokens)


def allowance_headers(
    protocol: str, requests: Allowance | None, tokens: Allowance | None
) -> dict[str, str]:
    """What is left of a key's limits, in `protocol`'s spelling (none for an unset limit)."""
    headers: dict[str, str] = {}
    for name, allowance in (("requests", requests), ("tokens", tokens)):
        if allowance is not None:
            headers |= _allowance_headers(protocol, name, allowance)
    return headers


def _allowance_headers(protocol: str, name: str, allowance: Allowance) -> dict[str, str]:
    limit, remaining, reset = allowance
    if protocol == "anthropic":
        at = datetime.now(UTC) + timedelta(seconds=math.ceil(reset))
        prefix = f"anthropic-ratelimit-{name}"
        return {
            f"{prefix}-limit": str(limit),
            f"{prefix}-remaining": str(remaining),
            f"{prefix}-reset": at.replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        }
    return {
        f"x-ratelimit-limit-{name}": str(limit),
        f"x-ratelimit-remaining-{name}": str(remaining),
        f"x-ratelimit-reset-{name}": go_duration(reset),
    }
