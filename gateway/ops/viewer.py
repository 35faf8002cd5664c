"""Who is looking at the ops page's data (`/ui/api/`), and what they may see.

The admin (the admin key; with no keys at all, a peer on this machine of a loopback bind)
sees everything and may act. Any other valid API key sees the models it may use and its own
requests only: its Activity rows and plots are its own, and it gets no controls, no other
keys' rows and no live feed of everyone's events. Keys are named by label (the entry's
`label`, else `key:` and a keyed hash of the key: gateway/control/key_names.py), never by
their secret nor by their place in the list, so a key removed from the config leaves rows
no other key's label names: the admin's alone. On a gateway without API keys, whoever is
not the admin sees the models and no rows: keyless requests are nobody's to read but the
admin's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from engines.errors import Forbidden, Unauthorized
from gateway.control.key_names import KeyNames
from gateway.control.keys import ADMIN_LABEL, has_keys, key_entries
from gateway.http.auth import admin_refusal, key_names, matched_entry, presented_key, same_secret
from gateway.ops.activity.rows import NO_ROW
from schemas.config import ServerConfig

# The label of no key (labels start with a letter or digit): the rows of a viewer who is
# neither the admin nor a key, on a gateway without keys, are none.
NOBODY = ""
# The API-key guard leaves routes marked so to their own guard: this module's.
OWN_GUARD = {"admin": True}


@dataclass(frozen=True)
class Viewer:
    admin: bool
    key: str | None  # the viewer's key label; None: sees every key's rows
    models: tuple[str, ...] | None  # names the key may use; None: every model


def _known(
    server: ServerConfig, names: KeyNames, presented: Iterable[str]
) -> tuple[str, tuple | None] | None:
    """(label, models it may use; None: every one) of the configured key among `presented`
    (header values), or None. Every key is compared with every value, always (constant time).
    """
    entry = matched_entry(key_entries(server, names), [value for value in presented if value])
    return None if entry is None else (entry.label, entry.models)


def key_label(server: ServerConfig, names: KeyNames, presented: Iterable[str]) -> str | None:
    """The label of the key among `presented` the config knows (`admin` for the admin key)."""
    values = [value for value in presented if value]
    admin = bool(server.admin_key) and any(same_secret(v, server.admin_key) for v in values)
    known = _known(server, names, values)
    return ADMIN_LABEL if admin else (known[0] if known else None)


def row_key(server: ServerConfig, names: KeyNames, presented: Iterable[str]) -> str | None:
    """What the Activity store names a request's row by, as it starts: its key's label,
    None on a gateway without keys, `NO_ROW` for one that presents no key the config knows
    on a gateway with keys (it is refused before anything: a 401)."""
    label = key_label(server, names, presented)
    return NO_ROW if label is None and has_keys(server) else label


def viewer_of(connection: ASGIConnection) -> Viewer:
    """The viewer a request comes from; `Unauthorized` for a missing or unknown key."""
    if admin_refusal(connection) is None:
        return Viewer(admin=True, key=None, models=None)
    server = connection.app.state.registry.current.config.server
    if not has_keys(server):  # an open gateway: its models, but no rows and no controls
        return Viewer(admin=False, key=NOBODY, models=None)
    known = _known(server, key_names(connection), [presented_key(connection) or ""])
    if known is None:
        raise Unauthorized(
            "missing or invalid API key: send it as 'Authorization: Bearer <key>' or 'x-api-key'"
        )
    return Viewer(admin=False, key=known[0], models=known[1])


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
