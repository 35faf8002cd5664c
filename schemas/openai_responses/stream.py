"""OpenAI Responses API: the stream events of a response, `type` being the SSE event name
too: the response's lifecycle, its output items and content parts, and the text, reasoning,
summary and function-call argument deltas."""

from __future__ import annotations

from typing import Any

from schemas.openai_responses.response import (
    OutputItem,
    OutputText,
    ReasoningText,
    Response,
    SummaryText,
)
from schemas.wire import Wire


class Event(Wire, kw_only=True, tag_field="type"):
    sequence_number: int


class ResponseCreated(Event, kw_only=True, tag="response.created"):
    response: Response


class ResponseQueued(Event, kw_only=True, tag="response.queued"):
    response: Response


class ResponseFailed(Event, kw_only=True, tag="response.failed"):
    response: Response


class ResponseInProgress(Event, kw_only=True, tag="response.in_progress"):
    response: Response


class ResponseCompleted(Event, kw_only=True, tag="response.completed"):
    response: Response


class ResponseIncomplete(Event, kw_only=True, tag="response.incomplete"):
    response: Response


class OutputItemAdded(Event, kw_only=True, tag="response.output_item.added"):
    output_index: int
    item: OutputItem


class OutputItemDone(Event, kw_only=True, tag="response.output_item.done"):
    output_index: int
    item: OutputItem


class ContentPartAdded(Event, kw_only=True, tag="response.content_part.added"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | ReasoningText


class ContentPartDone(Event, kw_only=True, tag="response.content_part.done"):
    item_id: str
    output_index: int
    content_index: int
    part: OutputText | ReasoningText


class ErrorEvent(Event, kw_only=True, tag="error"):
    """A failure after the stream began (the 200 is out)."""

    code: str | None = None
    message: str
    param: str | None = None


class ReasoningTextDelta(Event, kw_only=True, tag="response.reasoning_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str


class ReasoningTextDone(Event, kw_only=True, tag="response.reasoning_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str


class ReasoningSummaryPartAdded(Event, kw_only=True, tag="response.reasoning_summary_part.added"):
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


class ReasoningSummaryPartDone(Event, kw_only=True, tag="response.reasoning_summary_part.done"):
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


class ReasoningSummaryTextDelta(Event, kw_only=True, tag="response.reasoning_summary_text.delta"):
    item_id: str
    output_index: int
    summary_index: int
    delta: str


class ReasoningSummaryTextDone(Event, kw_only=True, tag="response.reasoning_summary_text.done"):
    item_id: str
    output_index: int
    summary_index: int
    text: str


class OutputTextDelta(Event, kw_only=True, tag="response.output_text.delta"):
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Any] = []


class OutputTextDone(Event, kw_only=True, tag="response.output_text.done"):
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Any] = []


class FunctionCallArgumentsDelta(Event, kw_only=True, tag="response.function_call_arguments.delta"):
    item_id: str
    output_index: int
    delta: str


class FunctionCallArgumentsDone(Event, kw_only=True, tag="response.function_call_arguments.done"):
    item_id: str
    output_index: int
    name: str
    arguments: str


# The gateway's MCP tool loop (gateway/openai/mcp_loop.py): a server's tool list, and each call.
class McpListToolsInProgress(Event, kw_only=True, tag="response.mcp_list_tools.in_progress"):
    item_id: str
    output_index: int


class McpListToolsCompleted(Event, kw_only=True, tag="response.mcp_list_tools.completed"):
    item_id: str
    output_index: int


class McpListToolsFailed(Event, kw_only=True, tag="response.mcp_list_tools.failed"):
    item_id: str
    output_index: int


class McpCallInProgress(Event, kw_only=True, tag="response.mcp_call.in_progress"):
    item_id: str
    output_index: int


class McpCallArgumentsDelta(Event, kw_only=True, tag="response.mcp_call_arguments.delta"):
    item_id: str
    output_index: int
    delta: str


class McpCallArgumentsDone(Event, kw_only=True, tag="response.mcp_call_arguments.done"):
    item_id: str
    output_index: int
    arguments: str


class McpCallCompleted(Event, kw_only=True, tag="response.mcp_call.completed"):
    item_id: str
    output_index: int


class McpCallFailed(Event, kw_only=True, tag="response.mcp_call.failed"):
    item_id: str
    output_index: int
