"""The API-key guard: checked after routing, on every route not marked public.

The guard runs on the route the router actually chose, so whatever spelling of a path
reaches a handler (`//v1/models`, `%2F`, trailing slashes) meets the same check, and a path
that reaches no handler is a 404 that carries no data.
"""

from __future__ import annotations

import hashlib
import hmac

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from engines.errors import Forbidden, GatewayError, Unauthorized
from engines.log import bind
from gateway.control.key_names import KeyNames
from gateway.control.keys import (
    ALLOWED_MCP_SERVERS,
    ALLOWED_MODELS,
    KEY_RUN_TOOLS,
    KeyEntry,
    has_keys,
    key_entries,
)
from gateway.control.limits import KeyLimiter
from gateway.http.errors import protocol_of, protocols_of
from gateway.http.exposure import is_loopback
from gateway.http.ratelimit import asked_priority
from gateway.http.request_state import at_end, leave_client
from schemas.canonical import Client

ADMIN_LOOPBACK_ONLY = (
    "admin routes answer only on this machine (a loopback peer) while server.admin_key is "
    "not set; set server.admin_key to reload, load or unload models from elsewhere"
)
ADMIN_KEY_MISSING = (
    "admin routes are closed: server.api_keys is set but server.admin_key is not, and API "
    "keys do not open admin routes; set server.admin_key to reload, load or unload models"
)
ADMIN_NETWORK_BIND = (
    "admin routes and ops views are closed: this gateway listens on a network address and "
    "server.admin_key is not set (a peer on this machine is not enough off loopback); set "
    "server.admin_key to reload, load or unload models and to read the ops views"
)
OPS_NEED_ADMIN = "the ops views show every model and every client's events: they need the admin key"
OPS_NEED_OPS_KEY = (
    "the ops views show every model and every client's events: they need an API key "
    "limited to no models (models: []) while server.admin_key is not set"
)


def presented_key(connection: ASGIConnection) -> str | None:
    """The key a client sent, as `Authorization: Bearer` or `x-api-key`."""
    authorization = connection.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return connection.headers.get("x-api-key") or None


# A request the gateway makes of itself (a batch line) carries, in its scope's state, the
# digest of the key that made its batch: whose stored Responses it reads and writes.
STORED_OWNER = "stored_owner"


def key_digest(key: str | None) -> str:
    """Who owns a stored row by key: a digest of the API key ("" for none), never the key."""
    return hashlib.sha256(key.encode()).hexdigest() if key else ""


def stored_owner(connection: ASGIConnection) -> str:
    """Whose stored Responses a request reads and writes: the digest of the key it
    presented; a batch line's, that of the key that made its batch (no header reaches it)."""
    if on_behalf_of(connection) is not None:
        return connection.scope.get("state", {}).get(STORED_OWNER, "")
    return key_digest(presented_key(connection))


def same_secret(presented: str | None, secret: str) -> bool:
    """Constant-time comparison: how long it takes says nothing about the secret."""
    return hmac.compare_digest((presented or "").encode(), secret.encode())


def matched_entry(entries: list[KeyEntry], presented: list[str]) -> KeyEntry | None:
    """The configured key among `presented` (header values), or None. Every key is compared
    with every value, always: which key matched (if any) takes the same time."""
    matched = None
    for entry in entries:
        if any(same_secret(value, entry.secret) for value in presented) and matched is None:
            matched = entry
    return matched


def key_names(connection: ASGIConnection) -> KeyNames:
    """The app's names for keys without `label` (gateway/control/key_names.py)."""
    return connection.app.state.key_names


def on_loopback(connection: ASGIConnection) -> bool:
    """Whether the gateway listens on loopback only (an app made without a bind: so too)."""
    bind = connection.app.state.get("bind_host")
    return bind is None or is_loopback(bind)


def admin_refusal(connection: ASGIConnection) -> GatewayError | None:
    """Why this request is not the admin's, or None when it is.

    With `server.admin_key` set, the admin is who presents it (Bearer or x-api-key). With
    API keys and no admin key nobody is (403): the gateway is guarded, and no key opens
    admin actions. With no key at all, a loopback peer of a loopback bind is (403 to any
    other): off loopback nobody is, as a page in a browser on this machine can reach a
    network bind under a name of its own (DNS rebinding) from a loopback peer.
    """
    server = connection.app.state.registry.current.config.server
    if server.admin_key is None:
        if has_keys(server):
            return Forbidden(ADMIN_KEY_MISSING)
        if not on_loopback(connection):
            return Forbidden(ADMIN_NETWORK_BIND)
        # No key at all: the peer's own address is the guard (the Host header is the
        # client's to write; the peer address is not).
        peer = (connection.client.host if connection.client else "").removeprefix("::ffff:")
        return None if is_loopback(peer) else Forbidden(ADMIN_LOOPBACK_ONLY)
    if not same_secret(presented_key(connection), server.admin_key):
        return Unauthorized("admin routes need the admin key (server.admin_key)")
    return None


def ops_refusal(
    connection: ASGIConnection, matched: KeyEntry | None, admin: bool
) -> GatewayError | None:
    """Why this request may not read the ops views (`/metrics`, `/ui/state`, `/ui/events`),
    or None when it may: they show every model and every client's requests.

    The admin may. Where API keys are set and no admin key is, a key limited to no models
    (`models: []`, the ops key) may too; no other key ever does. With no API keys, whoever
    `admin_refusal` lets through (a loopback peer of a loopback bind while no admin key is
    set; the admin key's holder once one is).
    """
    server = connection.app.state.registry.current.config.server
    if admin:
        return None
    if not has_keys(server):
        return admin_refusal(connection)
    if matched is None:
        return None  # the key check's own 401 follows
    if server.admin_key:
        return Forbidden(OPS_NEED_ADMIN)
    return None if matched.models == () else Forbidden(OPS_NEED_OPS_KEY)


async def require_api_key(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    """Litestar guard: when `server.api_keys` is set, every non-public route needs one of them.

    Ops reads (`opt={"ops": True}`: metrics, the ops page's data and event feed) show every
    model and every tenant's events: see `ops_refusal`. Admin routes are left to their own guard;
    a route marked `admin_too` (a pull, which the admin may do more with) also takes the
    admin key.
    A request on a key is then held to the key's limits (429 past one), named by the key's
    label in every event it causes, and given its priority (`x-gateway-priority`, at most
    the key's `priority.max`).
    Async on purpose: litestar runs a sync guard in a worker thread, whose context would
    not carry `ALLOWED_MODELS` back.
    """
    ALLOWED_MODELS.set(None)
    ALLOWED_MCP_SERVERS.set(None)
    KEY_RUN_TOOLS.set(None)
    server = connection.app.state.registry.current.config.server
    if handler.opt.get("public") or handler.opt.get("admin"):
        return
    entries = key_entries(server, key_names(connection))
    if (behalf := on_behalf_of(connection)) is not None:
        _admit_on_behalf(connection, entries, behalf)
        return
    key = presented_key(connection)
    matched = matched_entry(entries, [key] if key else [])
    admin = bool(server.admin_key and key and same_secret(key, server.admin_key))
    if handler.opt.get("ops"):
        if (refusal := ops_refusal(connection, matched, admin)) is not None:
            raise refusal
        if admin:
            return
    if not entries:
        leave_client(connection, Client(priority=asked_priority(connection, None)))
        return
    if admin and handler.opt.get("admin_too"):
        return
    if matched is None:
        raise Unauthorized(
            "missing or invalid API key: send it as 'Authorization: Bearer <key>' or 'x-api-key'"
        )
    _admit(connection, matched, asked_priority(connection, matched.priority))


def on_behalf_of(connection: ASGIConnection) -> Client | None:
    """Who a request the gateway makes of itself (a batch line, gateway/batches/dispatch.py)
    is made for: set on its scope by the gateway, never by a client (no header reaches it)."""
    return connection.scope.get("state", {}).get("on_behalf")


def _admit_on_behalf(connection: ASGIConnection, entries: list[KeyEntry], behalf: Client) -> None:
    """A batch line runs as its batch's key, at the priority the batch gave it: that key's
    models, limits and budget hold for it as for the key's own requests."""
    if not entries:
        leave_client(connection, Client(priority=behalf.priority))
        return
    matched = next((e for e in entries if e.label == behalf.key), None)
    if matched is None:
        raise Unauthorized("the API key that made this batch is no longer configured")
    _admit(connection, matched, behalf.priority)


def _admit(connection: ASGIConnection, matched: KeyEntry, priority: int) -> None:
    ALLOWED_MODELS.set(matched.models)
    ALLOWED_MCP_SERVERS.set(matched.mcp_servers)
    KEY_RUN_TOOLS.set(matched.run_tools)
    bind(key_label=matched.label)
    limiter: KeyLimiter = connection.app.state.limiter
    at_end(connection.scope, limiter.admit(matched.label, matched.limits))  # its slot
    # The answer tells what is left, as OpenAI's and Anthropic's do (gateway/http/middleware.py).
    protocol, protocols = protocol_of(connection), protocols_of(connection.app)
    connection.scope.setdefault("state", {})["key_allowance"] = lambda: protocols.allowance_headers(
        protocol, *limiter.allowances(matched.label, matched.limits)
    )
    # Its label and priority ride on the request the adapter hands the door; the runners
    # tell the limiter of the tokens it spends under that label (gateway/app.py).
    leave_client(connection, Client(key=matched.label, priority=priority))
