"""OpenAI Responses API: input items to the canonical request, output to a response object or
its event stream. Nothing is stored, so what needs stored state is refused by name."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Request, Response, post
from litestar.response import ServerSentEvent, ServerSentEventMessage

from engines.errors import BadRequest
from engines.policy.answer import answer
from gateway.body import decode_body
from gateway.chat_request import build_chat_request
from gateway.errors import stream_failure
from gateway.openai import effort
from gateway.registry import Generation, announce
from gateway.responses_events import EventBuilder
from gateway.streaming import unless_client_leaves
from schemas import openai_responses as wire
from schemas.canonical import ChatRequest, Message, Output, ToolCall, ToolSpec

NO_STORED_STATE = (
    "this gateway stores no responses or conversations: send the whole conversation as input"
)
UNSUPPORTED_PARTS = {"input_image": "image", "input_file": "file", "input_audio": "audio"}


def _refuse_unsupported(data: wire.ResponseRequest) -> None:
    if data.previous_response_id is not None:
        raise BadRequest(f"previous_response_id is not supported: {NO_STORED_STATE}")
    if data.conversation is not None:
        raise BadRequest(f"conversation is not supported: {NO_STORED_STATE}")
    if data.background:
        raise BadRequest("background responses are not supported: there is no stored state")
    if data.prompt is not None:
        raise BadRequest("stored prompts ($.prompt) are not supported: send input")
    if data.text is not None and data.text.format.type != "text":
        raise BadRequest(
            f"text.format {data.text.format.type!r} (structured output) is not supported yet"
        )
    if data.top_logprobs:
        raise BadRequest("logprobs ($.top_logprobs) are not supported yet")
    for i, tool in enumerate(data.tools):
        if tool.type != "function":
            raise BadRequest(f"tools of type {tool.type!r} are not supported ($.tools[{i}].type)")
        if not tool.name:
            raise BadRequest(f"a function tool needs a name ($.tools[{i}].name)")
    choice = data.tool_choice
    if choice not in ("auto", "none"):
        raise BadRequest("tool_choice may be 'auto' or 'none': forcing a tool is not supported")


def _items(raw: list[dict[str, Any]]) -> wire.InputItems:
    """The input items as structs; an item without `type` is a message."""
    for i, item in enumerate(raw):
        kind = item.setdefault("type", "message")
        if kind == "item_reference":
            raise BadRequest(f"item references are not supported ($.input[{i}]): {NO_STORED_STATE}")
        if kind not in wire.INPUT_ITEM_TYPES:
            raise BadRequest(f"input items of type {kind!r} are not supported ($.input[{i}].type)")
    try:
        return msgspec.convert(raw, wire.InputItems)
    except msgspec.ValidationError as error:
        path = str(error).replace("`$[", "`$.input[")
        raise BadRequest(f"invalid request: {path}") from None


def _text(content: str | list[wire.InputPart], where: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for j, part in enumerate(content):
        if part.type in UNSUPPORTED_PARTS:
            kind = UNSUPPORTED_PARTS[part.type]
            raise BadRequest(f"{kind} inputs are not supported, only text ({where}[{j}])")
        if part.type in ("input_text", "output_text"):
            texts.append(part.text or "")
        elif part.type == "refusal":
            texts.append(part.refusal or "")
        else:
            raise BadRequest(
                f"content parts of type {part.type!r} are not supported ({where}[{j}])"
            )
    return "".join(texts)


def to_messages(data: wire.ResponseRequest) -> list[Message]:
    """`instructions` and `input` as one canonical conversation."""
    messages = [Message(role="system", content=data.instructions)] if data.instructions else []
    if isinstance(data.input, str):
        return [*messages, Message(role="user", content=data.input)]
    names: dict[str, str] = {}
    for i, item in enumerate(_items(data.input)):
        if isinstance(item, wire.InputMessage):
            content = _text(item.content, f"$.input[{i}].content")
            messages.append(Message(role=item.role, content=content))
        elif isinstance(item, wire.InputFunctionCall):
            call = ToolCall(id=item.call_id, name=item.name, arguments=item.arguments)
            names[call.id] = call.name
            last = messages[-1] if messages else None
            # An answer's text and its calls arrive as separate items; they were one turn.
            if last is not None and last.role == "assistant":
                messages[-1] = msgspec.structs.replace(last, tool_calls=[*last.tool_calls, call])
            else:
                messages.append(Message(role="assistant", tool_calls=[call]))
        elif isinstance(item, wire.InputFunctionCallOutput):
            content = _text(item.output, f"$.input[{i}].output")
            name = names.get(item.call_id or "")
            messages.append(
                Message(role="tool", content=content, tool_call_id=item.call_id, name=name)
            )
    return messages


def to_tools(data: wire.ResponseRequest) -> list[ToolSpec]:
    if data.tool_choice == "none":
        return []  # the model is not to call any: it need not hear of them
    return [
        ToolSpec(name=t.name or "", description=t.description or "", parameters=t.parameters or {})
        for t in data.tools
    ]


def _skeleton(data: wire.ResponseRequest, chat: ChatRequest, model: str) -> wire.Response:
    """The response before any output: what was asked, with the settings actually applied."""
    return wire.Response(
        id=f"resp_{uuid.uuid4().hex}",
        created_at=int(time.time()),
        status="in_progress",
        instructions=data.instructions,
        max_output_tokens=chat.max_tokens,
        model=model,
        parallel_tool_calls=data.parallel_tool_calls,
        temperature=chat.sampling.temperature,
        top_p=chat.sampling.top_p,
        tool_choice=data.tool_choice,
        tools=[
            wire.FunctionTool(
                name=t.name or "",
                description=t.description,
                parameters=t.parameters,
                strict=t.strict,
            )
            for t in data.tools
        ],
        metadata=data.metadata or {},
        user=data.user,
    )


@post("/v1/responses", status_code=200)
async def responses(request: Request, generation: Generation) -> Response | ServerSentEvent:
    """A response to `input`; `stream: true` answers with the Responses event stream."""
    data = await decode_body(request, wire.ResponseRequest)
    _refuse_unsupported(data)
    messages = to_messages(data)
    route = announce(generation.resolve(data.model), stream=data.stream, protocol="openai")
    chat = build_chat_request(
        route.model,
        messages,
        max_tokens=data.max_output_tokens,
        temperature=data.temperature,
        top_p=data.top_p,
        tools=to_tools(data),
        reasoning=effort(data.reasoning.effort if data.reasoning else None),
    )
    skeleton = _skeleton(data, chat, route.served)
    results = answer(route.runner, chat)
    builder = EventBuilder(skeleton)
    if not data.stream:
        # The same builder as the stream, its events unused: both answers have one shape.
        return Response(await unless_client_leaves(request, _final(builder, results)))
    # Wait for the first output before answering, so queue and load errors keep their status.
    first = await unless_client_leaves(request, anext(results))
    return ServerSentEvent(_events(request, builder, first, results))


async def _final(builder: EventBuilder, results: AsyncIterator[Output]) -> wire.Response:
    builder.start()
    async for output in results:
        builder.feed(output)
    return builder.response


async def _events(
    request: Request, builder: EventBuilder, first: Output, results: AsyncIterator[Output]
) -> AsyncIterator[ServerSentEventMessage]:
    def message(event: wire.Event) -> ServerSentEventMessage:
        data = msgspec.json.encode(event).decode()
        return ServerSentEventMessage(event=type(event).__struct_config__.tag, data=data)

    try:
        for event in builder.start():
            yield message(event)
        for event in builder.feed(first):
            yield message(event)
        async for output in results:
            for event in builder.feed(output):
                yield message(event)
    except Exception as error:  # the 200 is out: only an `error` event can tell the client
        _, text, kind = stream_failure(request, error)
        yield message(builder.error(kind, text))
    finally:
        # The client went away (or the stream ended): stop the job within a token.
        await results.aclose()


ROUTES = [responses]
