"""What the key guard resolves of a request, left on its ASGI scope for the rest of it.

The guard (gateway/http/auth.py) finds the request's key; what that key grants travels on
from here by hand, never in a context variable: the `Client` (the key's label, the priority
given) that each protocol adapter puts on its canonical request, and what ends with the
request (the key's concurrent slot), which the request's middleware runs as it ends.
"""

from __future__ import annotations

from collections.abc import Callable

from litestar.connection import ASGIConnection
from litestar.types import Scope

from schemas.canonical import NO_CLIENT, Client


def _state(scope: Scope) -> dict:
    return scope.setdefault("state", {})


def leave_client(connection: ASGIConnection, client: Client) -> None:
    """The guard's word on who sent the request, for its adapter to pass to the door."""
    _state(connection.scope)["client"] = client


def client_of(connection: ASGIConnection) -> Client:
    """Who sent the request, as its guard resolved it (no one in particular, where no guard
    ran: a public route)."""
    return connection.scope.get("state", {}).get("client", NO_CLIENT)


def leave_header(connection: ASGIConnection, name: str, value: str) -> None:
    """A header for the response, however it is sent (a stream's too): the request's
    middleware adds it as the response starts."""
    _state(connection.scope).setdefault("headers", []).append((name.encode(), value.encode()))


def headers_left(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The headers `leave_header` left for the response."""
    return scope.get("state", {}).get("headers", [])


def at_end(scope: Scope, release: Callable[[], None]) -> None:
    """Call `release` once the request has ended, however it ends."""
    _state(scope).setdefault("at_end", []).append(release)


def end(scope: Scope) -> None:
    """The request has ended: run what was left to run then (`at_end`), in order."""
    for release in scope.get("state", {}).pop("at_end", ()):
        release()
