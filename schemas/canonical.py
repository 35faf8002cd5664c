"""The one request and the one stream of output that every protocol adapter maps to and from.

Protocol adapters in `gateway/` build a `ChatRequest`; engines in `engines/` consume it and
yield `TextDelta`s followed by exactly one `Finished`.
"""

from __future__ import annotations

from typing import Literal

import msgspec


class Message(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str


class Sampling(msgspec.Struct, frozen=True, kw_only=True):
    """Sampling settings after request > model > file defaults have been merged."""

    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None


class ChatRequest(msgspec.Struct, frozen=True, kw_only=True):
    messages: list[Message]
    max_tokens: int
    sampling: Sampling = Sampling()
    stop: list[str] = []


StopReason = Literal["stop", "length", "stop_string", "cancelled"]


class TextDelta(msgspec.Struct, frozen=True, tag="text"):
    text: str


class Finished(msgspec.Struct, frozen=True, kw_only=True, tag="finished"):
    """The engine's own accounting of one generation."""

    stop_reason: StopReason
    prompt_tokens: int
    new_tokens: int
    prefill_s: float
    decode_s: float


Output = TextDelta | Finished
