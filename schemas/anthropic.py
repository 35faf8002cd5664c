"""Anthropic Messages wire formats. Lenient: fields we do not use (metadata,
service_tier, ...) are ignored; numbers out of Anthropic's ranges fail naming the field."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, UnsetType

from schemas.wire import Wire

# Content blocks, tagged by their `type`. Request and response share them.


class CacheControl(Wire, kw_only=True):
    """A cache breakpoint: the prompt up to this block is kept cached for `ttl`."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] = "5m"


class Block(Wire, kw_only=True, tag_field="type"):
    """A content block; its `type` picks the struct. `cache_control` marks a breakpoint
    on a request's block (never written on an answer's)."""

    cache_control: CacheControl | UnsetType = UNSET


class TextBlock(Block, kw_only=True, tag="text"):
    text: str


class ImageBlock(Block, kw_only=True, tag="image"):
    source: Any = None


class DocumentBlock(Block, kw_only=True, tag="document"):
    source: Any = None


class ToolUseBlock(Block, kw_only=True, tag="tool_use"):
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(Block, kw_only=True, tag="tool_result"):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock | DocumentBlock] = ""
    is_error: bool = False


class ThinkingBlock(Block, kw_only=True, tag="thinking"):
    thinking: str = ""
    signature: str | None = None


class RedactedThinkingBlock(Block, kw_only=True, tag="redacted_thinking"):
    data: str = ""


InputBlock = (
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
)


class InputMessage(Wire, kw_only=True):
    # "system": a system turn inside the conversation (Claude Code sends them for models
    # outside its own list, beta `mid-conversation-system-2026-04-07`).
    role: Literal["user", "assistant", "system"]
    content: str | list[InputBlock]


class Tool(Wire, kw_only=True):
    # Absent or "custom" for client tools; Anthropic's server tools (web_search_...) set it.
    type: str | None = None
    name: Annotated[str, Meta(min_length=1)]
    description: str = ""
    input_schema: dict[str, Any] = {}
    strict: bool | None = None  # true: the call's input is decoded under `input_schema`
    cache_control: CacheControl | UnsetType = UNSET


class JsonOutputFormat(Wire, kw_only=True):
    type: Literal["json_schema"]
    schema: dict[str, Any]


class OutputConfig(Wire, kw_only=True):
    """`format`: the answer as JSON under a schema; `effort`: how hard to think."""

    format: JsonOutputFormat | None = None
    effort: Literal["low", "medium", "high", "max"] | None = None


class ThinkingConfig(Wire, kw_only=True):
    """`{"type": "enabled", "budget_tokens": N}`, `{"type": "disabled"}`, `adaptive`, ..."""

    type: str
    budget_tokens: Annotated[int, Meta(ge=1)] | None = None


class ToolChoice(Wire, kw_only=True):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None  # None: not said (not the same as false)


class PromptRequest(Wire, kw_only=True):
    """What a prompt is made of: shared by messages and count_tokens."""

    model: Annotated[str, Meta(min_length=1)]
    messages: Annotated[list[InputMessage], Meta(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: list[Tool] = []
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None


class MessagesRequest(PromptRequest, kw_only=True):
    max_tokens: Annotated[int, Meta(ge=1)]  # required, as Anthropic requires it
    stream: bool = False
    stop_sequences: Annotated[list[str], Meta(max_length=32)] = []
    temperature: Annotated[float, Meta(ge=0, le=1)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, Meta(ge=0)] | None = None
    # Defined by Anthropic and refused by name when set
    # (see gateway/anthropic/messages.py: REFUSED).
    container: Any = None
    mcp_servers: list[Any] | None = None
    context_management: Any = None
    service_tier: str | None = None
    # Informational: it labels the request (`user_id`) and changes no output.
    metadata: Any = None


class CountTokensRequest(PromptRequest, kw_only=True):
    pass


class TokenCount(Wire, kw_only=True):
    input_tokens: int


# Responses.


class Usage(Wire, kw_only=True):
    """The prompt is input + cache_creation + cache_read tokens (docs/kv-cache.md, usage)."""

    input_tokens: int
    output_tokens: int
    # Written to a cache tier for later requests; read from one (RAM or disk).
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class Message(Wire, kw_only=True):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ThinkingBlock | TextBlock | ToolUseBlock]
    stop_reason: StopReason | None = None
    stop_sequence: str | None = None
    usage: Usage


# Stream events: the SSE `event:` name is the struct's tag, which is also its `type`.


class StreamEvent(Wire, kw_only=True, tag_field="type"):
    """One server-sent event of a streamed message."""


class MessageStart(StreamEvent, kw_only=True, tag="message_start"):
    message: Message


class ContentBlockStart(StreamEvent, kw_only=True, tag="content_block_start"):
    index: int
    content_block: ThinkingBlock | TextBlock | ToolUseBlock


class Ping(StreamEvent, kw_only=True, tag="ping"):
    pass


class TextDelta(Block, kw_only=True, tag="text_delta"):
    text: str


class InputJsonDelta(Block, kw_only=True, tag="input_json_delta"):
    partial_json: str


class ThinkingDelta(Block, kw_only=True, tag="thinking_delta"):
    thinking: str


class SignatureDelta(Block, kw_only=True, tag="signature_delta"):
    signature: str


class ContentBlockDelta(StreamEvent, kw_only=True, tag="content_block_delta"):
    index: int
    delta: TextDelta | InputJsonDelta | ThinkingDelta | SignatureDelta


class ContentBlockStop(StreamEvent, kw_only=True, tag="content_block_stop"):
    index: int


class MessageDeltaBody(Wire, kw_only=True):
    stop_reason: StopReason
    stop_sequence: str | None = None


class MessageDeltaUsage(Wire, kw_only=True):
    # Cumulative totals: the engine's input count is authoritative and overrides message_start's.
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


class MessageDelta(StreamEvent, kw_only=True, tag="message_delta"):
    delta: MessageDeltaBody
    usage: MessageDeltaUsage


class MessageStop(StreamEvent, kw_only=True, tag="message_stop"):
    pass


# The model list in Anthropic's shape (GET /v1/models with an `anthropic-version` header).


class ModelInfo(Wire, kw_only=True):
    type: Literal["model"] = "model"
    id: str
    display_name: str
    created_at: str  # RFC 3339


class ModelPage(Wire, kw_only=True):
    data: list[ModelInfo]
    has_more: bool = False
    first_id: str | None = None
    last_id: str | None = None
