"""The one base of every wire-format struct (OpenAI, Anthropic, Ollama, embeddings)."""

from __future__ import annotations

import msgspec


class Wire(msgspec.Struct, kw_only=True):
    """Lenient, as clients need: fields the gateway does not model are ignored, not rejected
    (SDKs add fields release after release). Config structs are the opposite: `Strict`."""
