"""The tool loop the gateway runs for a Responses request with `mcp` tools: model -> a call of
an MCP tool -> `tools/call` -> its result -> the model again, until it answers without one.
Each server's tool list is an `mcp_list_tools` item, each call an `mcp_call` item (or an
`mcp_approval_request` that ends the response, when the client approves calls first); the
same events stream as OpenAI's. At most `max_tool_calls` calls (default MAX_CALLS): once
made, the model is asked again with no tools and must answer."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from msgspec.structs import replace

from gateway.mcp.server import CallResult
from gateway.openai.mcp_tools import McpTool, McpTools
from gateway.openai.response_events import EventBuilder
from schemas import openai_responses as wire
from schemas.canonical import (
    ChatAsk,
    Finished,
    Message,
    Output,
    TextDelta,
    ToolCall,
    ToolCallOutput,
)

MAX_CALLS = 8  # a request that says no `max_tool_calls`: a model that calls forever stops here


@dataclass
class Totals:
    """Usage over every round: the response's usage is what all its generations spent."""

    prompt: int = 0
    new: int = 0
    reused: int = 0
    written: int = 0

    def add(self, finished: Finished) -> None:
        self.prompt += finished.prompt_tokens
        self.new += finished.new_tokens
        self.reused += finished.reused_prefix_tokens
        self.written += finished.cache_written_tokens

    def finished(self, last: Finished) -> Finished:
        return replace(
            last,
            prompt_tokens=self.prompt,
            new_tokens=self.new,
            reused_prefix_tokens=self.reused,
            cache_written_tokens=self.written,
        )


async def run(
    builder: EventBuilder,
    results: AsyncIterator[Output],
    ask: ChatAsk,
    next_round: Callable[[ChatAsk], Awaitable[AsyncIterator[Output]]],
    mcp: McpTools,
    max_calls: int | None,
) -> AsyncIterator[wire.Event]:
    """The response's events, round after round; the builder holds the response."""
    for event in builder.start():
        yield event
    for listed in mcp.listed:
        for event in builder.open_item(listed, (wire.McpListToolsInProgress, {})):
            yield event
        for event in builder.close_item(listed, (wire.McpListToolsCompleted, {})):
            yield event
    limit = MAX_CALLS if max_calls is None else max_calls
    made, totals, messages = 0, Totals(), list(ask.messages)
    while True:
        calls: list[ToolCall] = []
        said: list[str] = []
        async for output in results:
            if isinstance(output, ToolCallOutput) and output.call.name in mcp.tools:
                calls.append(output.call)
                continue
            if isinstance(output, TextDelta):
                said.append(output.text)
            if isinstance(output, Finished):
                totals.add(output)
                if calls:
                    continue  # not the end: the model hears the results first
                output = totals.finished(output)
            for event in builder.feed(output):
                yield event
        if not calls:
            return
        answers: list[Message] = []
        waiting = False
        for call in calls:
            tool = mcp.tools[call.name]
            if made >= limit:
                text = f"not run: this response's max_tool_calls ({limit}) were made"
            elif tool.approval:
                waiting = True
                async for event in _approval_request(builder, tool, call):
                    yield event
                continue
            else:
                made += 1
                result = CallResult(text="")
                async for event in _call(builder, tool, call, None):
                    if isinstance(event, CallResult):
                        result = event
                    else:
                        yield event
                text = _for_model(result)
            answers.append(Message(role="tool", content=text, tool_call_id=call.id, name=call.name))
        if waiting:
            # The client answers with mcp_approval_response items (previous_response_id).
            last = Finished(
                stop_reason="stop", prompt_tokens=0, new_tokens=0, prefill_s=0, decode_s=0
            )
            for event in builder.feed(totals.finished(last)):
                yield event
            return
        messages += [Message(role="assistant", content="".join(said), tool_calls=calls), *answers]
        ask = _next_ask(ask, messages, done=made >= limit)
        results = await next_round(ask)


async def call_approved(
    builder: EventBuilder, tool: McpTool, call: ToolCall, approval_id: str
) -> AsyncIterator[wire.Event | CallResult]:
    """A call the client approved in this request's input: made before the model runs."""
    async for event in _call(builder, tool, call, approval_id):
        yield event


async def _call(
    builder: EventBuilder, tool: McpTool, call: ToolCall, approval_id: str | None
) -> AsyncIterator[wire.Event | CallResult]:
    item = wire.OutputMcpCall(
        id=f"mcp_{uuid.uuid4().hex}",
        server_label=tool.label,
        name=call.name,
        arguments=call.arguments,
        status="in_progress",
        approval_request_id=approval_id,
    )
    for event in builder.open_item(
        item,
        (wire.McpCallInProgress, {}),
        (wire.McpCallArgumentsDelta, {"delta": call.arguments}),
        (wire.McpCallArgumentsDone, {"arguments": call.arguments}),
    ):
        yield event
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as error:
        arguments = None
        result = CallResult(text="", error=f"arguments are not JSON: {error}", protocol_error=True)
    if arguments is not None and not isinstance(arguments, dict):
        result = CallResult(text="", error="arguments are not a JSON object", protocol_error=True)
    elif arguments is not None:
        result = await tool.server.call(call.name, arguments)
    yield result
    if result.error is None:
        done = replace(item, status="completed", output=result.text)
        end = wire.McpCallCompleted
    elif result.protocol_error:
        error = {"type": "mcp_protocol_error", "code": -32603, "message": result.error}
        done, end = replace(item, status="failed", error=error), wire.McpCallFailed
    else:
        error = {
            "type": "mcp_tool_execution_error",
            "content": [{"type": "text", "text": result.text}],
        }
        done, end = replace(item, status="failed", error=error), wire.McpCallFailed
    for event in builder.close_item(done, (end, {})):
        yield event


async def _approval_request(
    builder: EventBuilder, tool: McpTool, call: ToolCall
) -> AsyncIterator[wire.Event]:
    item = wire.OutputMcpApprovalRequest(
        id=f"mcpr_{uuid.uuid4().hex}",
        server_label=tool.label,
        name=call.name,
        arguments=call.arguments,
    )
    for event in builder.open_item(item):
        yield event
    for event in builder.close_item(item):
        yield event


def _for_model(result: CallResult) -> str:
    """A failed call reaches the model as an error it can read, never as the gateway's 500."""
    if result.error is None:
        return result.text
    return f"error: {result.error}"


def _next_ask(ask: ChatAsk, messages: list[Message], *, done: bool) -> ChatAsk:
    """The next round: the results heard; a forced call was made, so the choice is free;
    with every allowed call made, no tools at all."""
    controls = replace(ask.controls, tool_choice="auto", forced_tool=None)
    if done:
        controls = replace(controls, strict_tools=[])
        return replace(ask, messages=messages, tools=[], controls=controls)
    return replace(ask, messages=messages, controls=controls)
