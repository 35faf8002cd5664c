"""Which protocol a request speaks, and how that protocol says what the shared layer has to
say: its error envelope and its rate-limit headers.

http/ names no protocol. Each protocol package describes itself in a `Protocol` and the app
factory registers it (gateway/app.py), as Litestar's exception handlers are registered by
the app rather than known by the router. A request belongs to the first protocol that
claims it (a path prefix, or a prefix and a header its clients send); the default protocol
takes every other path (ops, admin, anything no route matches).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import NamedTuple

from engines.errors import Allowance, GatewayError

# (status, message, kind) -> the protocol's error body; `kind` is the gateway's own word for
# the error (gateway/http/errors.py RENDERING), or None where only the status is known.
Envelope = Callable[[int, str, str | None], dict]
# ("requests" | "tokens", what is left of that limit) -> the headers that tell it.
AllowanceHeaders = Callable[[str, Allowance], dict[str, str]]
# (error, message) -> the message as this protocol's clients expect it worded.
Wording = Callable[[GatewayError, str], str]


def as_is(_error: GatewayError, message: str) -> str:
    return message


class Protocol(NamedTuple):
    """What a protocol package tells http/ of itself."""

    name: str
    envelope: Envelope
    # Its clients' rate-limit headers; None: the default protocol's (Ollama has none).
    allowance_headers: AllowanceHeaders | None = None
    wording: Wording = as_is
    # Request headers its browser clients send (allowed by CORS).
    headers: tuple[str, ...] = ()


class Claim(NamedTuple):
    prefix: str
    header: str | None  # a request header that must be present too, or None
    protocol: Protocol


class Protocols:
    """The registered protocols, and which one a request speaks."""

    def __init__(self, default: Protocol) -> None:
        self.default = default
        self._claims: list[Claim] = []
        self._known = [default]

    def register(
        self, protocol: Protocol, *prefixes: str, with_header: tuple[str, str] | None = None
    ) -> None:
        """`protocol` speaks on the paths under `prefixes`, and also on the path prefix
        `with_header[1]` when the request carries the header `with_header[0]`."""
        self._claims += [Claim(prefix, None, protocol) for prefix in prefixes]
        if with_header is not None:
            header, prefix = with_header
            self._claims.append(Claim(prefix, header, protocol))
        if protocol not in self._known:
            self._known.append(protocol)

    def of(self, path: str, headers: Collection[str] = ()) -> Protocol:
        """The protocol of a request to `path` that sent the headers named `headers`."""
        for claim in self._claims:
            if path.startswith(claim.prefix) and (claim.header is None or claim.header in headers):
                return claim.protocol
        return self.default

    def allowance_headers(
        self, protocol: Protocol, requests: Allowance | None, tokens: Allowance | None
    ) -> dict[str, str]:
        """What is left of a key's limits, as `protocol`'s clients read it (none for an
        unset limit)."""
        spell = protocol.allowance_headers or self.default.allowance_headers
        headers: dict[str, str] = {}
        for name, allowance in (("requests", requests), ("tokens", tokens)):
            if allowance is not None and spell is not None:
                headers |= spell(name, allowance)
        return headers

    def cors_headers(self) -> list[str]:
        """Every registered protocol's own request headers."""
        return [h for protocol in self._known for h in protocol.headers]


def header_names(scope_headers: Collection[tuple[bytes, bytes]]) -> set[str]:
    """The names of an ASGI scope's headers, as `Protocols.of` takes them."""
    return {name.decode("latin-1").lower() for name, _ in scope_headers}
