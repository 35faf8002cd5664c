"""The one request and the one stream of output that every protocol adapter maps to and from.

Protocol adapters in `gateway/` build a `ChatRequest` (or an `EmbedRequest`); engines in
`engines/` consume it and yield `TextDelta`s and `ToolCallOutput`s followed by exactly one
`Finished` (or one `Embedded`).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Role = Literal["system", "developer", "user", "assistant", "tool"]


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    name: str
    arguments: str  # JSON text, as every protocol carries it or parses it from


class Message(msgspec.Struct, frozen=True, kw_only=True):
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = []
    tool_call_id: str | None = None  # on a `tool` message: the call it answers
    name: str | None = None  # on a `tool` message: the tool's name


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] = {}  # JSON Schema of the arguments


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
    tools: list[ToolSpec] = []
    # Set for plain completions: the text is the prompt as is, no chat template.
    raw_prompt: str | None = None


class EmbedRequest(msgspec.Struct, frozen=True, kw_only=True):
    inputs: list[str]
    # Cut inputs longer than the model's window (sentence-transformers does); False: refuse.
    truncate: bool = True


StopReason = Literal["stop", "length", "stop_string", "tool_calls", "cancelled"]


class TextDelta(msgspec.Struct, frozen=True, tag="text"):
    text: str


class ToolCallOutput(msgspec.Struct, frozen=True, tag="tool_call"):
    call: ToolCall


class Finished(msgspec.Struct, frozen=True, kw_only=True, tag="finished"):
    """The engine's own accounting of one generation."""

    stop_reason: StopReason
    prompt_tokens: int
    new_tokens: int
    prefill_s: float
    decode_s: float


class Embedded(msgspec.Struct, frozen=True, kw_only=True, tag="embedded"):
    vectors: list[list[float]]
    prompt_tokens: int
    seconds: float


Output = TextDelta | ToolCallOutput | Finished | Embedded
