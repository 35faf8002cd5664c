"""OpenAI Responses API: the response object (its output items, usage and settings as
served), the deleted-response answer and the list of a response's input items."""

from __future__ import annotations

from typing import Any, Literal

from msgspec import field

from schemas.openai_responses.mcp import (
    McpToolEcho,
    OutputMcpApprovalRequest,
    OutputMcpCall,
    OutputMcpListTools,
)
from schemas.openai_responses.request import TextConfig, ToolChoiceObject
from schemas.wire import Wire


class OutputText(Wire, kw_only=True):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = []
    logprobs: list[Any] = []


ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputMessage(Wire, kw_only=True):
    type: Literal["message"] = "message"
    id: str
    role: Literal["assistant"] = "assistant"
    status: ItemStatus
    content: list[OutputText]


class OutputFunctionCall(Wire, kw_only=True):
    type: Literal["function_call"] = "function_call"
    id: str
    call_id: str
    name: str
    arguments: str
    status: ItemStatus


class ReasoningText(Wire, kw_only=True):
    type: Literal["reasoning_text"] = "reasoning_text"
    text: str


class SummaryText(Wire, kw_only=True):
    type: Literal["summary_text"] = "summary_text"
    text: str


class OutputReasoning(Wire, kw_only=True):
    """The model's thinking, as its full text: in `content`, or in `summary` when asked."""

    type: Literal["reasoning"] = "reasoning"
    id: str
    summary: list[SummaryText] = []
    content: list[ReasoningText] = []
    status: ItemStatus


OutputItem = (
    OutputMessage
    | OutputFunctionCall
    | OutputReasoning
    | OutputMcpListTools
    | OutputMcpCall
    | OutputMcpApprovalRequest
)


class InputTokensDetails(Wire, kw_only=True):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(Wire, kw_only=True):
    reasoning_tokens: int = 0


class ResponseUsage(Wire, kw_only=True):
    input_tokens: int
    input_tokens_details: InputTokensDetails = field(default_factory=InputTokensDetails)
    output_tokens: int
    output_tokens_details: OutputTokensDetails = field(default_factory=OutputTokensDetails)
    total_tokens: int


class IncompleteDetails(Wire, kw_only=True):
    reason: Literal["max_output_tokens"]


class FunctionTool(Wire, kw_only=True):
    type: Literal["function"] = "function"
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ResponseError(Wire, kw_only=True):
    """Why a response failed (a background one: it had no status line to fail with)."""

    code: str
    message: str


# A background response is `queued`, then `in_progress`, then one of the last four.
ResponseStatus = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]


class Response(Wire, kw_only=True):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: ResponseStatus
    background: bool = False
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[OutputItem] = []
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    store: bool = True
    temperature: float | None = None
    top_p: float | None = None
    text: TextConfig = field(default_factory=TextConfig)
    tool_choice: str | ToolChoiceObject = "auto"
    tools: list[FunctionTool | McpToolEcho] = []
    truncation: Literal["disabled"] = "disabled"
    usage: ResponseUsage | None = None
    metadata: dict[str, str] = {}
    user: str | None = None


class DeletedResponse(Wire, kw_only=True):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


class InputItemList(Wire, kw_only=True):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False
