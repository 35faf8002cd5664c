"""The tool loop the gateway runs for a Responses request with `mcp` tools: model -> a call of
an MCP tool -> `tools/call` -> its result -> the model again, until it answers without one.
Each server's tool list is an `mcp_list_tools` item, each call an `mcp_call` item (or an
`mcp_approval_request` that ends the response, when the client approves calls first); the
same events stream as OpenAI's. At most `max_tool_calls` calls (default MAX_CALLS): once
made, the model is asked again with no tools and must answer."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from msgspec.structs import replace

from engines.errors import BadRequest
from gateway.mcp.calls import call_tool, for_model
from gateway.mcp.loop import MAX_CALLS, Totals
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


@dataclass
class Answered:
    """A call the client approved (or denied) in this request's input, made before the
    model runs: its `mcp_call` item (None when denied) and what the model is told."""

    item: wire.OutputMcpCall | None
    messages: list[Message]


async def answer_approvals(mcp: McpTools, earlier: list[dict], own: list[dict]) -> list[Answered]:
    """Each `mcp_approval_response` of this request's input, answering an
    `mcp_approval_request` of the conversation (`previous_response_id`, or the input): the
    call made when approved, the model told when not."""
    items = [*earlier, *own]
    requests = {i.get("id"): i for i in items if i.get("type") == "mcp_approval_request"}
    answers = [i for i in own if i.get("type") == "mcp_approval_response"]
    done = {i.get("approval_request_id") for i in items if i.get("type") == "mcp_call"}
    answered = []
    for answer in answers:
        asked = requests.get(answer.get("approval_request_id"))
        where = f"mcp_approval_response {answer.get('approval_request_id')!r}"
        if asked is None:
            raise BadRequest(
                f"{where} answers no mcp_approval_request of this conversation "
                "(send it with previous_response_id, or with the request item in input)"
            )
        if asked["id"] in done:
            continue  # answered in an earlier turn already
        tool = mcp.tools.get(asked.get("name", ""))
        if tool is None or tool.label != asked.get("server_label"):
            raise BadRequest(
                f"{where}: tool {asked.get('name')!r} of MCP server "
                f"{asked.get('server_label')!r} is not among this request's mcp tools"
            )
        call = ToolCall(id=asked["id"], name=asked["name"], arguments=asked.get("arguments", ""))
        turn = Message(role="assistant", tool_calls=[call])
        if not answer.get("approve"):
            reason = answer.get("reason") or "no reason given"
            text = f"error: the client did not approve this call ({reason})"
            answered.append(Answered(None, [turn, _tool_message(call, text)]))
            continue
        result = await made_call(tool, call)
        item = _call_item(tool, call, asked["id"])
        answered.append(
            Answered(_done(item, result), [turn, _tool_message(call, for_model(result))])
        )
    return answered


def call_messages(item: wire.InputMcpCall) -> list[Message]:
    """An earlier turn's `mcp_call` as the model hears it: its call, and its result."""
    call = ToolCall(id=item.id, name=item.name, arguments=item.arguments)
    failed = item.output is None or item.error is not None
    text = f"error: {item.error}" if failed else item.output
    return [Message(role="assistant", tool_calls=[call]), _tool_message(call, text)]


async def run(
    builder: EventBuilder,
    results: AsyncIterator[Output],
    ask: ChatAsk,
    next_round: Callable[[ChatAsk], Awaitable[AsyncIterator[Output]]],
    mcp: McpTools,
    max_calls: int | None,
    answered: list[Answered] = (),
) -> AsyncIterator[wire.Event]:
    """The response's events, round after round; the builder holds the response."""
    for event in builder.start():
        yield event
    for listed in mcp.listed:
        for event in builder.open_item(listed, (wire.McpListToolsInProgress, {})):
            yield event
        for event in builder.close_item(listed, (wire.McpListToolsCompleted, {})):
            yield event
    made = 0
    for approved in answered:
        if approved.item is not None:
            made += 1
            for event in _item_events(builder, approved.item):
                yield event
    limit = MAX_CALLS if max_calls is None else max_calls
    totals, messages = Totals(), list(ask.messages)
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
                item = _call_item(tool, call, None)
                for event in builder.open_item(item, *_call_started(item)):
                    yield event
                result = await made_call(tool, call)
                done = _done(item, result)
                for event in builder.close_item(done, (_end_event(done), {})):
                    yield event
                text = for_model(result)
            answers.append(_tool_message(call, text))
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


def _call_item(tool: McpTool, call: ToolCall, approval_id: str | None) -> wire.OutputMcpCall:
    return wire.OutputMcpCall(
        id=f"mcp_{uuid.uuid4().hex}",
        server_label=tool.label,
        name=call.name,
        arguments=call.arguments,
        status="in_progress",
        approval_request_id=approval_id,
    )


def _call_started(item: wire.OutputMcpCall) -> list[tuple[type, dict]]:
    return [
        (wire.McpCallInProgress, {}),
        (wire.McpCallArgumentsDelta, {"delta": item.arguments}),
        (wire.McpCallArgumentsDone, {"arguments": item.arguments}),
    ]


def _end_event(done: wire.OutputMcpCall) -> type:
    return wire.McpCallCompleted if done.status == "completed" else wire.McpCallFailed


def _item_events(builder: EventBuilder, done: wire.OutputMcpCall) -> list[wire.Event]:
    """A call made before the stream began (an approved one): all of its events at once."""
    item = replace(done, status="in_progress", output=None, error=None)
    events = builder.open_item(item, *_call_started(item))
    return events + builder.close_item(done, (_end_event(done), {}))


async def made_call(tool: McpTool, call: ToolCall) -> CallResult:
    return await call_tool(tool.server, call)


def _done(item: wire.OutputMcpCall, result: CallResult) -> wire.OutputMcpCall:
    """The item as the call ended, with the error in one of OpenAI's two shapes."""
    if result.error is None:
        return replace(item, status="completed", output=result.text)
    if result.protocol_error:
        error = {"type": "mcp_protocol_error", "code": result.code, "message": result.error}
    else:
        content = [{"type": "text", "text": result.text}]
        error = {"type": "mcp_tool_execution_error", "content": content}
    return replace(item, status="failed", error=error)


def _tool_message(call: ToolCall, text: str) -> Message:
    return Message(role="tool", content=text, tool_call_id=call.id, name=call.name)


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


def _next_ask(ask: ChatAsk, messages: list[Message], *, done: bool) -> ChatAsk:
    """The next round: the results heard; a forced call was made, so the choice is free;
    with every allowed call made, no tools at all."""
    controls = replace(ask.controls, tool_choice="auto", forced_tool=None)
    if done:
        controls = replace(controls, strict_tools=[])
        return replace(ask, messages=messages, tools=[], controls=controls)
    return replace(ask, messages=messages, controls=controls)
