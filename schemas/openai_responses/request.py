"""OpenAI Responses API (`/v1/responses`): the request and its input items, tools, text
format and reasoning settings. Lenient: clients send fields we do not use, and that is fine."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, field

from schemas.openai import ReasoningEffort
from schemas.wire import Wire


class InputPart(Wire, kw_only=True):
    """A content part: `input_text`/`output_text` carry `text`, `refusal` its `refusal`,
    `input_image` its `image_url`; the rest (files, audio) the adapter refuses by name."""

    type: str
    text: str | None = None
    refusal: str | None = None
    image_url: str | None = None  # `input_image`: a data URL or http(s) URL
    file_id: str | None = None  # `input_image` by uploaded file: nothing is stored here
    detail: Literal["auto", "low", "high"] = "auto"


class InputItem(Wire, kw_only=True, tag_field="type"):
    """An item of `input`, told apart by `type` (a message when it has none)."""


class InputMessage(InputItem, kw_only=True, tag="message"):
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[InputPart]


class InputFunctionCall(InputItem, kw_only=True, tag="function_call"):
    call_id: Annotated[str, Meta(min_length=1)]
    name: Annotated[str, Meta(min_length=1)]
    arguments: str


class InputFunctionCallOutput(InputItem, kw_only=True, tag="function_call_output"):
    call_id: str | None = None
    output: str | list[InputPart]


class InputReasoning(InputItem, kw_only=True, tag="reasoning"):
    """An earlier turn's reasoning, sent back by agents; nothing here can use it."""


# The MCP loop's items join these in openai_responses/mcp.py (`InputItems` there).
INPUT_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")
# Ids given to input items that come without one, by type (as OpenAI numbers them).
ITEM_ID_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "mcp_approval_response": "mcpa",
}


class Tool(Wire, kw_only=True):
    """A function tool, or an `mcp` tool (its fields below; checked as
    `openai_responses.mcp.McpToolRequest` by gateway/openai/mcp_tools.py)."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    server_label: str | None = None
    server_url: str | None = None
    allowed_tools: Any = None
    require_approval: Any = None
    server_description: str | None = None
    headers: Any = None
    authorization: str | None = None
    connector_id: str | None = None
    tunnel_id: str | None = None
    defer_loading: bool | None = None
    allowed_callers: Any = None


class ToolChoiceObject(Wire, kw_only=True):
    type: str
    name: str | None = None


class TextFormat(Wire, kw_only=True, omit_defaults=True):
    """`text`, `json_object`, or `json_schema` with its `name`, `schema` and `strict`."""

    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    schema: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class TextConfig(Wire, kw_only=True):
    format: TextFormat = field(default_factory=TextFormat)
    verbosity: str | None = None


class ReasoningConfig(Wire, kw_only=True):
    effort: ReasoningEffort | None = None
    # "auto" | "concise" | "detailed": the reasoning also comes as the item's `summary` (its
    # whole text: no summariser runs) with `response.reasoning_summary_text.*` events.
    summary: str | None = None


class ResponseRequest(Wire, kw_only=True):
    model: Annotated[str, Meta(min_length=1)]
    # Items stay plain objects here: an item may leave out `type` (then it is a message),
    # which a msgspec tagged union cannot express; the adapter converts them.
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: Annotated[int, Meta(ge=1)] | None = None
    temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, Meta(gt=0, le=1)] | None = None
    tools: list[Tool] = []
    tool_choice: str | ToolChoiceObject = "auto"
    parallel_tool_calls: bool | None = None  # None: not said (a forced call is then one)
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    background: bool | None = None
    prompt: dict[str, Any] | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    include: list[str] | None = None
    n: Annotated[int, Meta(ge=1)] | None = None  # not OpenAI's: refused by name when > 1
    # Defined by OpenAI and refused by name when set (see gateway/openai/responses.py: REFUSED).
    truncation: str | None = None
    max_tool_calls: Annotated[int, Meta(ge=1)] | None = None
    service_tier: str | None = None
    stream_options: dict[str, Any] | None = None
    # Informational: they identify the caller or label the request, and change no output.
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
