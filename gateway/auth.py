"""API keys: checked after routing, on every route not marked public."""

from __future__ import annotations

import hmac

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from engines.errors import GatewayError


class Unauthorized(GatewayError):
    status = 401
    kind = "authentication_error"


def presented_key(connection: ASGIConnection) -> str | None:
    """The key a client sent, as OpenAI (`Authorization: Bearer`) or Anthropic (`x-api-key`)."""
    authorization = connection.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return connection.headers.get("x-api-key") or None


def require_api_key(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    """Litestar guard: when `server.api_keys` is set, every non-public route needs one of them."""
    keys: list[str] = connection.app.state.registry.current.config.server.api_keys
    if not keys or handler.opt.get("public") or handler.opt.get("admin"):
        return
    key = presented_key(connection)
    # Compare against every key, always, in constant time: timing reveals nothing.
    matched = False
    for allowed in keys:
        matched |= key is not None and hmac.compare_digest(key.encode(), allowed.encode())
    if not matched:
        raise Unauthorized(
            "missing or invalid API key: send it as 'Authorization: Bearer <key>' or 'x-api-key'"
        )
