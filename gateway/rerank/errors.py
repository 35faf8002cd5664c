"""How rerank clients hear an error: Cohere's body, `{"message": ...}` (Cohere's SDK raises
it as its ApiError's body; Jina's and LiteLLM's clients read the status and the text). The
rate-limit headers are the default protocol's."""

from __future__ import annotations

from gateway.http.protocols import Protocol, Protocols

# The paths this protocol speaks on; `/rerank` is LiteLLM's, `/v1/rerank` everyone else's.
PATHS = ("/rerank", "/v1/rerank", "/v2/rerank")


def envelope(status: int, message: str, kind: str | None = None) -> dict:
    """Cohere's error body: the message alone."""
    return {"message": message}


PROTOCOL = Protocol("rerank", envelope)


def register(protocols: Protocols) -> None:
    protocols.register(PROTOCOL, *PATHS)
