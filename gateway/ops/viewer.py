"""Who is looking at the ops page's data (`/ui/api/`), and what they may see.

The admin (the admin key; with no keys at all, a peer on this machine) sees everything and
may act. Any other valid API key sees the models it may use and its own requests only: its
Activity rows and plots are its own, and it gets no controls, no other keys' rows and no
live feed of everyone's events. Keys are named by label (`key-N`: the N-th entry of
`server.api_keys`, or its `label` where the entry has one), never by their secret.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from engines.errors import Forbidden, Unauthorized
from gateway.control.keys import key_entries
from gateway.http.auth import admin_refusal, presented_key, same_secret
from schemas.config import ApiKey, ServerConfig

ADMIN_LABEL = "admin"
# The API-key guard leaves routes marked so to their own guard: this module's.
OWN_GUARD = {"admin": True}


@dataclass(frozen=True)
class Viewer:
    admin: bool
    key: str | None  # the viewer's key label; None: sees every key's rows
    models: tuple[str, ...] | None  # names the key may use; None: every model


def key_label(server: ServerConfig, presented: Iterable[str]) -> str | None:
    """The label of the key among `presented` (header values) that the config knows, or None.

    Every configured key is compared with every presented value, always (constant time).
    """
    label = None
    values = [value for value in presented if value]
    if server.admin_key and any(same_secret(v, server.admin_key) for v in values):
        label = ADMIN_LABEL
    for index, entry in enumerate(server.api_keys):
        secret = entry.key if isinstance(entry, ApiKey) else entry
        if secret and any(same_secret(v, secret) for v in values) and label is None:
            label = getattr(entry, "label", None) or f"key-{index + 1}"
    return label


def viewer_of(connection: ASGIConnection) -> Viewer:
    """The viewer a request comes from; `Unauthorized` for a missing or unknown key."""
    if admin_refusal(connection) is None:
        return Viewer(admin=True, key=None, models=None)
    server = connection.app.state.registry.current.config.server
    entries = key_entries(server)
    if not entries:  # an open gateway: no tenants to keep apart, but no controls either
        return Viewer(admin=False, key=None, models=None)
    key = presented_key(connection)
    label = key_label(server, [key or ""])
    if label is None:
        raise Unauthorized(
            "missing or invalid API key: send it as 'Authorization: Bearer <key>' or 'x-api-key'"
        )
    models = next(m for secret, m in entries if same_secret(key, secret))
    return Viewer(admin=False, key=label, models=models)


async def require_viewer(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """Litestar guard of every `/ui/api/` route: any valid key (what it sees is narrowed).
    Async: litestar would run a sync guard on a worker thread."""
    viewer_of(connection)


async def provide_viewer(request: Request) -> Viewer:
    """The `viewer` dependency of the `/ui/api/` routes."""
    return viewer_of(request)


def only_admin(viewer: Viewer) -> None:
    """`Forbidden` unless the viewer is the admin (the page's controls)."""
    if not viewer.admin:
        raise Forbidden("this needs the admin key (server.admin_key)")
