"""The request's priority from its `x-gateway-priority` header, within its key's.

The rate-limit headers of a key's answers are each protocol's to spell: it registers them
with http/ (gateway/http/protocols.py `Protocol.allowance_headers`).
"""

from __future__ import annotations

from litestar.connection import ASGIConnection

from engines.errors import BadRequest
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
