"""Who can reach the gateway: the bind refusal, the Host check, CORS, the Origin check.

A web page the user visits can aim the browser at the gateway under a hostile name that
resolves to its address (DNS rebinding): to the browser the gateway is then that page's own
origin, so the Origin check passes. Such a request carries that name in its Host header, so
on loopback every Host must be a loopback name, and on a network address a loopback name,
an IP address (a browser sends one only when it was asked for that address) or a name in
`server.allowed_hosts`. And a page on any site can send the user's browser to
`http://127.0.0.1:8000` with a "simple" request (a POST of `text/plain`, no preflight): the
browser names that site in the `Origin` header, so a request whose Origin is neither listed
in `cors_origins` nor the gateway's own is refused before it costs anything.
"""

from __future__ import annotations

import ipaddress

from litestar.config.cors import CORSConfig
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway.control.keys import has_keys
from gateway.http.middleware import send_error
from schemas.config import ServerConfig


def is_loopback(host: str) -> bool:
    """True for `localhost`, 127.0.0.0/8 and ::1 (brackets allowed)."""
    host = host.strip().lower().removeprefix("[").removesuffix("]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a Host header, without its port: `[::1]:8000` → `::1`."""
    header = header.strip()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def bind_refusal(server: ServerConfig, host: str) -> str | None:
    """Why serving on `host` is refused, or None: a network address needs API keys."""

    if is_loopback(host) or has_keys(server) or server.allow_unauthenticated_network:
        return None
    return (
        f"refusing to listen on {host}: it is reachable from the network and server.api_keys "
        "is empty, so anyone there could use every model. Set server.api_keys, bind "
        "127.0.0.1, or set server.allow_unauthenticated_network: true to accept the risk."
    )


def bind_warning(server: ServerConfig, host: str) -> str | None:
    """What to say at start about a network bind whose admin routes no key opens."""

    if is_loopback(host) or server.admin_key:
        return None
    if not has_keys(server):
        return (
            f"listening on {host} without server.admin_key: admin routes (/admin/reload, "
            "load, unload) and the ops views (/metrics, /ui/state, /ui/events) answer 403 "
            "until server.admin_key is set, a peer on this machine included"
        )
    return (
        f"listening on {host} with server.api_keys but no server.admin_key: admin routes "
        "(/admin/reload, load, unload) answer 403 until server.admin_key is set"
    )


def cors_config(server: ServerConfig, protocol_headers: list[str]) -> CORSConfig | None:
    """CORS for the listed origins only; none listed means no CORS headers at all. Browser
    clients may send the key's headers and each protocol's own (`protocol_headers`).

    Origins are exact (the config refuses `*`), and credentials are never allowed: a
    browser page sends keys as headers, which need no cookie.
    """
    if not server.cors_origins:
        return None
    return CORSConfig(
        allow_origins=list(server.cors_origins),
        allow_methods=["GET", "POST", "OPTIONS"],
        allow_headers=["authorization", "x-api-key", "content-type", *protocol_headers],
        allow_credentials=False,
        expose_headers=["x-request-id", "retry-after"],
    )


def is_address(name: str) -> bool:
    """True for an IPv4 or IPv6 address (as `host_name` leaves it: no brackets, no port)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_refusal(bind: str, name: str, allowed: list[str]) -> str | None:
    """Why a request naming `name` in its Host header is refused on `bind`, or None."""
    if is_loopback(name):
        return None
    if is_loopback(bind):
        return (
            "this gateway listens on loopback and answers only to a loopback Host "
            "(localhost, 127.0.0.1, [::1]); see server.host"
        )
    if is_address(name) or name.lower() in {n.lower() for n in (*allowed, bind)}:
        return None
    return (
        f"this gateway answers to IP addresses, loopback names and the names in "
        f"server.allowed_hosts, not to Host {name!r}: add it there if clients reach the "
        "gateway by that name"
    )


def host_guard(app: ASGIApp) -> ASGIApp:
    """ASGI middleware: a Host header naming what the gateway is not (see `host_refusal`)
    is a 403, on every bind."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        state = scope["app"].state
        bind = state.get("bind_host")
        if scope["type"] == "http" and bind:
            host = dict(scope["headers"]).get(b"host")
            # No Host at all (HTTP/1.0) cannot come from a browser: nothing to rebind.
            if host is not None:
                allowed = state.registry.current.config.server.allowed_hosts
                refusal = host_refusal(bind, host_name(host.decode("latin-1")), allowed)
                if refusal is not None:
                    await send_error(scope, send, 403, refusal)
                    return
        await app(scope, receive, send)

    return middleware


def origin_allowed(origin: str, host: str | None, listed: tuple[str, ...]) -> bool:
    """True for an origin listed in `cors_origins`, or the gateway's own (the ops page)."""
    if origin in listed:
        return True
    authority = origin.partition("://")[2]
    return bool(host) and origin.startswith(("http://", "https://")) and authority == host


def origin_guard(app: ASGIApp) -> ASGIApp:
    """ASGI middleware: a request whose `Origin` is not allowed is a 403, as Ollama does."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            origin = headers.get(b"origin")
            listed = scope["app"].state.get("cors_origins", ())
            host = headers.get(b"host", b"").decode("latin-1").lower()
            if origin is not None and not origin_allowed(origin.decode("latin-1"), host, listed):
                message = (
                    f"cross-origin request from {origin.decode('latin-1')!r} refused: a browser "
                    "page may call the gateway only from an origin in server.cors_origins"
                )
                await send_error(scope, send, 403, message, kind="permission_error")
                return
        await app(scope, receive, send)

    return middleware
