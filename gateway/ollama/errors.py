"""How Ollama's clients hear an error: `{"error": message}` on every `/api/` path. Ollama
has no rate-limit headers of its own: its clients get the default protocol's."""

from __future__ import annotations

from gateway.http.protocols import Protocol, Protocols


def envelope(status: int, message: str, kind: str | None = None) -> dict:
    """Ollama's error body: the message alone."""
    return {"error": message}


PROTOCOL = Protocol("ollama", envelope)


def register(protocols: Protocols) -> None:
    protocols.register(PROTOCOL, "/api/")
