"""API keys: checked after routing, on every route not marked public; per-key model lists.

The guard runs on the route the router actually chose, so whatever spelling of a path
reaches a handler (`//v1/models`, `%2F`, trailing slashes) meets the same check, and a path
that reaches no handler is a 404 that carries no data.
"""

from __future__ import annotations

import hmac
from contextvars import ContextVar
from typing import TYPE_CHECKING

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from engines.errors import Forbidden, Unauthorized
from schemas.config import ApiKey, ModelConfig, ServerConfig

if TYPE_CHECKING:
    from gateway.registry import Generation, Route


# The model names the request's key may use; None when it may use every model. Set by the
# guard in the request's own task, read where a model name is resolved.
ALLOWED_MODELS: ContextVar[tuple[str, ...] | None] = ContextVar("allowed_models", default=None)


def presented_key(connection: ASGIConnection) -> str | None:
    """The key a client sent, as OpenAI (`Authorization: Bearer`) or Anthropic (`x-api-key`)."""
    authorization = connection.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return connection.headers.get("x-api-key") or None


def key_entries(server: ServerConfig) -> list[tuple[str, tuple[str, ...] | None]]:
    """Each configured key with the model names it may use (None: every model)."""
    entries = []
    for entry in server.api_keys:
        if isinstance(entry, ApiKey):
            if entry.key:  # a key read from an unset ${VAR} is no key at all
                entries.append((entry.key, tuple(entry.models)))
        else:
            entries.append((entry, None))
    return entries


def same_secret(presented: str | None, secret: str) -> bool:
    """Constant-time comparison: how long it takes says nothing about the secret."""
    return hmac.compare_digest((presented or "").encode(), secret.encode())


async def require_api_key(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    """Litestar guard: when `server.api_keys` is set, every non-public route needs one of them.

    Ops reads (`opt={"ops": True}`: metrics, the ops page's data and event feed) also open to
    the admin key. Admin routes are left to their own guard. Async on purpose: litestar runs
    a sync guard in a worker thread, whose context would not carry `ALLOWED_MODELS` back.
    """
    ALLOWED_MODELS.set(None)
    server = connection.app.state.registry.current.config.server
    entries = key_entries(server)
    if not entries or handler.opt.get("public") or handler.opt.get("admin"):
        return
    key = presented_key(connection)
    # Compare against every key, always: which key matched (if any) takes the same time.
    matched: tuple[str, ...] | None | bool = False
    for secret, models in entries:
        if same_secret(key, secret) and key is not None and matched is False:
            matched = models
    if matched is False and handler.opt.get("ops") and server.admin_key:
        matched = None if same_secret(key, server.admin_key) and key else False
    if matched is False:
        raise Unauthorized(
            "missing or invalid API key: send it as 'Authorization: Bearer <key>' or 'x-api-key'"
        )
    ALLOWED_MODELS.set(matched)


def usable_models(generation: Generation) -> list[ModelConfig]:
    """The models the request's key may use, for the listing routes (every one without keys)."""
    names = ALLOWED_MODELS.get()
    if names is None:
        return list(generation.config.models)
    allowed = {generation.resolve_name(n) for n in names}
    return [m for m in generation.config.models if m.id in allowed]


def check_model_allowed(generation: Generation, route: Route) -> None:
    """`Forbidden` when the request's key may not use the model `route` serves."""
    names = ALLOWED_MODELS.get()
    if names is None:
        return
    allowed = {generation.resolve_name(n) for n in names} - {None}
    if route.served not in allowed:
        listed = ", ".join(names) or "none"
        raise Forbidden(
            f"this API key may not use model {route.requested!r} (it may use: {listed})"
        )
