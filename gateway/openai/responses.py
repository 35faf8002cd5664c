"""OpenAI Responses API: input items to the canonical request, output to a response object or
its event stream. Responses are stored (unless `store: false`) in
`gateway/openai/response_store.py`, so `previous_response_id` and `item_reference` continue
a conversation; `background: true` answers at once and works the response in the
background (`gateway/openai/background.py`); conversations are refused by name."""

from __future__ import annotations

import time
import uuid
from asyncio import to_thread
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgspec
from litestar import Request, Response, post
from litestar.response import ServerSentEventMessage, Stream

from engines.chat import serve_chat
from engines.errors import BadRequest, StoredNotFound
from gateway.canonical.choices import refuse_set
from gateway.canonical.dropped_tools import tell_dropped_tools
from gateway.canonical.images import fetch_images, image_part, message_with_parts
from gateway.control.registry import Generation, announce
from gateway.http.auth import on_behalf_of, stored_owner
from gateway.http.body import decode_body
from gateway.http.request_state import client_of
from gateway.http.streaming import sse_response, started, unless_client_leaves
from gateway.openai import mcp_loop, mcp_tools, stored_responses
from gateway.openai.background import BACKGROUND, BackgroundResponses
from gateway.openai.chat import effort
from gateway.openai.controls import controls, output_format, tool_choice
from gateway.openai.response_events import EventBuilder
from gateway.openai.response_store import ResponseStore
from gateway.openai.stored_responses import registry_server, store_of
from schemas import openai_responses as wire
from schemas.canonical import (
    ChatAsk,
    ChatRequest,
    Message,
    Output,
    OutputControls,
    Part,
    TextPart,
    ToolCall,
    ToolSpec,
)
from schemas.logprobs import LogprobsRequest

NO_CONVERSATIONS = "this gateway keeps no conversation objects: use previous_response_id"
UNSUPPORTED_PARTS = {"input_file": "file", "input_audio": "audio"}
INCLUDABLE = ("message.output_text.logprobs",)
# Fields OpenAI defines that this gateway cannot honour: a 400 naming each when set to
# anything but its no-op value.
REFUSED = {
    "truncation": lambda v: v != "disabled",
    "service_tier": lambda v: v not in ("auto", "default"),
    "stream_options": lambda v: bool(v),
}


def _refuse_unsupported(data: wire.ResponseRequest) -> None:
    if data.conversation is not None:
        raise BadRequest(f"conversation is not supported: {NO_CONVERSATIONS}")
    if data.background and data.store is False:
        raise BadRequest(
            "$.background: a background response is fetched by its id later, so it needs "
            "store: true (or store left out)"
        )
    if data.prompt is not None:
        raise BadRequest("stored prompts ($.prompt) are not supported: send input")
    refuse_set(data, REFUSED)
    if data.max_tool_calls is not None and not any(t.type == "mcp" for t in data.tools):
        # Only the gateway's own tool loop makes calls to count (gateway/openai/mcp_loop.py).
        raise BadRequest("$.max_tool_calls is not supported without an mcp tool")
    if data.text is not None and data.text.verbosity not in (None, "medium"):
        raise BadRequest("$.text.verbosity is not supported by this gateway")
    for item in data.include or []:
        if item not in INCLUDABLE:
            raise BadRequest(f"$.include: {item!r} is not supported (only {INCLUDABLE[0]!r})")
    for i, tool in enumerate(data.tools):
        if tool.type == "mcp":
            continue  # checked against the declared servers (gateway/openai/mcp_tools.py)
        if tool.type != "function":
            raise BadRequest(f"tools of type {tool.type!r} are not supported ($.tools[{i}].type)")
        if not tool.name:
            raise BadRequest(f"a function tool needs a name ($.tools[{i}].name)")
    if data.n not in (None, 1):
        raise BadRequest("$.n: the Responses API has one output per response; send n requests")


def response_controls(
    data: wire.ResponseRequest, mcp: list[ToolSpec] = ()
) -> tuple[list[ToolSpec], OutputControls]:
    """The tools offered and the output controls: `text.format`, `tool_choice`,
    `parallel_tool_calls`, strict tools, and logprobs when `include` asks for them."""
    fmt = None
    if data.text is not None:
        asked = data.text.format
        fmt = output_format(asked.type, asked.schema, "$.text.format")
    choice = data.tool_choice
    if isinstance(choice, wire.ToolChoiceObject) and choice.type != "function":
        raise BadRequest(f"$.tool_choice.type {choice.type!r} is not supported (only function)")
    if isinstance(choice, str) and choice not in ("none", "auto", "required"):
        raise BadRequest(f"$.tool_choice {choice!r} is not one of none, auto, required")
    tools, kind, forced = tool_choice(choice, [*to_tools(data), *mcp])
    strict = [t.name or "" for t in data.tools if t.strict]
    asked = INCLUDABLE[0] in (data.include or [])
    if data.top_logprobs and not asked:
        raise BadRequest(f"$.top_logprobs needs include: [{INCLUDABLE[0]!r}]")
    logprobs = LogprobsRequest(top=data.top_logprobs or 0) if asked else None
    return tools, controls(
        format=fmt,
        choice=kind,
        forced=forced,
        tools=tools,
        strict=strict,
        parallel=data.parallel_tool_calls,
        logprobs=logprobs,
    )


async def own_items(data: wire.ResponseRequest, store: ResponseStore, owner: str) -> list[dict]:
    """The request's input as items with ids (an item without `type` is a message), each
    `item_reference` replaced by the stored item it names."""
    raw = data.input
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    items = []
    for i, item in enumerate(raw):
        item = {"type": "message", **item}
        kind = item["type"]
        if kind == "item_reference":
            found = await to_thread(store.item, owner, str(item.get("id")))
            if found is None:
                raise StoredNotFound(
                    f"Item with id {item.get('id')!r} not found ($.input[{i}].id); stored "
                    "items belong to the API key that stored them"
                )
            item = found
        elif kind not in wire.ALL_INPUT_ITEM_TYPES:
            raise BadRequest(f"input items of type {kind!r} are not supported ($.input[{i}].type)")
        else:
            item.setdefault("id", f"{wire.ITEM_ID_PREFIXES.get(kind, 'item')}_{uuid.uuid4().hex}")
            if kind == "message" and isinstance(item.get("content"), str):
                # Stored as OpenAI lists them: content as parts.
                part = "output_text" if item.get("role") == "assistant" else "input_text"
                item["content"] = [{"type": part, "text": item["content"]}]
        items.append(item)
    return items


async def conversation(data: wire.ResponseRequest, store: ResponseStore, owner: str) -> list[dict]:
    """Everything before this request: the stored conversation `previous_response_id` ended."""
    if data.previous_response_id is None:
        return []
    earlier = await to_thread(store.context, owner, data.previous_response_id)
    if earlier is None:
        raise StoredNotFound(
            f"Previous response with id {data.previous_response_id!r} not found "
            "($.previous_response_id); stored responses belong to the API key that stored them"
        )
    if not earlier:  # stored, without its conversation yet: a background one, unfinished
        status = (await to_thread(store.response, owner, data.previous_response_id) or {}).get(
            "status"
        )
        if status in ("queued", "in_progress"):
            raise BadRequest(
                f"$.previous_response_id: response {data.previous_response_id!r} is "
                f"{status}: continue it once it has finished"
            )
    return earlier


def _items(raw: list[dict[str, Any]]) -> wire.InputItems:
    """Input items (plain objects, each with its `type`) as structs."""
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


def _message(item: wire.InputMessage, where: str) -> Message:
    """A message item; `input_image` parts keep their place among the text."""
    content = item.content
    if isinstance(content, str) or not any(p.type == "input_image" for p in content):
        return Message(role=item.role, content=_text(content, where))
    parts: list[Part] = []
    for j, part in enumerate(content):
        if part.type != "input_image":
            parts.append(TextPart(text=_text([part], where)))
        elif part.image_url:
            parts.append(image_part(part.image_url, f"{where}[{j}].image_url", part.detail))
        elif part.file_id:
            raise BadRequest(
                f"images by file_id are not supported: nothing is stored here "
                f"({where}[{j}].file_id); send image_url"
            )
        else:
            raise BadRequest(f"an input_image part needs image_url ({where}[{j}])")
    return message_with_parts(item.role, parts)


def to_messages(instructions: str | None, items: list[dict[str, Any]]) -> list[Message]:
    """`instructions` and the input items as one canonical conversation."""
    messages = [Message(role="system", content=instructions)] if instructions else []
    names: dict[str, str] = {}
    for i, item in enumerate(_items(items)):
        if isinstance(item, wire.InputMessage):
            messages.append(_message(item, f"$.input[{i}].content"))
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
        elif isinstance(item, wire.InputMcpCall):
            messages += mcp_loop.call_messages(item)
    return messages


def to_tools(data: wire.ResponseRequest) -> list[ToolSpec]:
    return [
        ToolSpec(name=t.name or "", description=t.description or "", parameters=t.parameters or {})
        for t in data.tools
        if t.type == "function"
    ]


def _skeleton(
    data: wire.ResponseRequest,
    chat: ChatRequest,
    model: str,
    mcp: mcp_tools.McpTools,
    background: dict | None = None,
) -> wire.Response:
    """The response before any output: what was asked, with the settings actually applied
    (a background response's work: the id and time its create call gave it)."""
    return wire.Response(
        id=background["id"] if background else f"resp_{uuid.uuid4().hex}",
        created_at=background["created_at"] if background else int(time.time()),
        status="in_progress",
        background=background is not None,
        instructions=data.instructions,
        max_output_tokens=chat.max_tokens,
        model=model,
        parallel_tool_calls=data.parallel_tool_calls is not False,
        temperature=chat.sampling.temperature,
        top_p=chat.sampling.top_p,
        tool_choice=data.tool_choice,
        text=data.text or wire.TextConfig(),
        tools=[
            wire.FunctionTool(
                name=t.name or "",
                description=t.description,
                parameters=t.parameters,
                strict=t.strict,
            )
            for t in data.tools
            if t.type == "function"
        ]
        + [mcp_tools.echo(spec) for spec in mcp.asked],
        metadata=data.metadata or {},
        user=data.user,
        previous_response_id=data.previous_response_id,
        store=data.store is not False,
    )


@post("/v1/responses", status_code=200)
async def responses(request: Request, generation: Generation) -> Response | Stream:
    """A response to `input`; `stream: true` answers with the Responses event stream."""
    data = await decode_body(request, wire.ResponseRequest)
    _refuse_unsupported(data)
    if data.background and on_behalf_of(request) is not None:
        raise BadRequest("$.background: a batch line is worked in the background already")
    if data.background:
        return await _background(request, generation, data)
    store, owner = store_of(request), stored_owner(request)  # a batch line's: its key's
    own = await own_items(data, store, owner)
    earlier = await conversation(data, store, owner)
    messages = to_messages(data.instructions, [*earlier, *own])
    messages = await fetch_images(request, messages, generation.config.server)
    route = announce(generation.resolve(data.model), stream=data.stream, protocol="openai")
    mcp = await mcp_tools.prepare(request, data)
    answered = await mcp_loop.answer_approvals(mcp, earlier, own)
    messages += [m for approval in answered for m in approval.messages]
    tools, output = response_controls(data, mcp.specs)
    if data.store is not False:
        # Before generating: an answer that cannot be stored is refused, not computed (an
        # SDK would retry a 500 that came after it, and pay for it again).
        await to_thread(store.check_writable)
    ask = ChatAsk(
        messages=messages,
        max_tokens=data.max_output_tokens,
        temperature=data.temperature,
        top_p=data.top_p,
        tools=tools,
        reasoning=effort(data.reasoning.effort if data.reasoning else None),
        controls=output,
        client=client_of(request),
    )
    chat, (results,), _ = await serve_chat(route.runner, ask)
    tell_dropped_tools(request, chat)
    skeleton = _skeleton(data, chat, route.served, mcp, request.scope["state"].get(BACKGROUND))
    summary = bool(data.reasoning and data.reasoning.summary)
    builder = EventBuilder(skeleton, summary=summary)

    async def keep(response: wire.Response) -> None:
        if response.store:  # `store: false` stores nothing
            whole = msgspec.to_builtins(response)
            context = [*earlier, *own, *whole["output"]]
            # Off the loop: a save evicts, and may wait for another process's write lock.
            await to_thread(store.save, registry_server(request), owner, whole, own, context)

    async def next_round(again: ChatAsk) -> AsyncIterator[Output]:
        _, (more,), _ = await serve_chat(route.runner, again)
        return more

    def events_of(outputs: AsyncIterator[Output]) -> AsyncIterator[wire.Event] | None:
        if not mcp.asked:
            return None
        limit = data.max_tool_calls
        return mcp_loop.run(builder, outputs, ask, next_round, mcp, limit, answered)

    if not data.stream:
        # The same builder as the stream, its events unused: both answers have one shape.
        final = await unless_client_leaves(request, _final(builder, results, events_of(results)))
        await keep(final)
        return Response(final)
    outputs = await started(request, results)

    def error_event(_status: int, message: str, kind: str) -> ServerSentEventMessage:
        return _sse(builder.error(kind, message))

    events = _events(builder, outputs, keep, events_of(outputs))
    return sse_response(request, events, error_event, outputs.aclose)


async def _background(
    request: Request, generation: Generation, data: wire.ResponseRequest
) -> Response | Stream:
    """`background: true`: the response stored `queued` and answered now (or its stream
    followed, with `stream: true`); its work runs as one more request to this route."""
    store, owner = store_of(request), stored_owner(request)
    route = generation.resolve(data.model)  # an unknown or forbidden model: refused now
    await to_thread(store.check_writable)
    queued = wire.Response(
        id=f"resp_{uuid.uuid4().hex}",
        created_at=int(time.time()),
        status="queued",
        background=True,
        instructions=data.instructions,
        max_output_tokens=data.max_output_tokens,
        model=route.served,
        parallel_tool_calls=data.parallel_tool_calls is not False,
        temperature=data.temperature,
        top_p=data.top_p,
        tool_choice=data.tool_choice,
        text=data.text or wire.TextConfig(),
        metadata=data.metadata or {},
        user=data.user,
        previous_response_id=data.previous_response_id,
    )
    whole = msgspec.to_builtins(queued)
    await to_thread(store.save, registry_server(request), owner, whole, [], [])
    body = msgspec.json.decode(await request.body())
    runs: BackgroundResponses = request.app.state.background_responses
    runs.launch(owner, client_of(request), body, whole)
    if not data.stream:
        return Response(whole)
    events = await runs.events(owner, queued.id, None)

    def error_event(_status: int, message: str, kind: str) -> ServerSentEventMessage:
        return ServerSentEventMessage(
            event="error", data=stored_responses.error_data(kind, message)
        )

    async def leave() -> None:
        return None  # a client that leaves leaves the work running: that is the point

    return sse_response(request, events, error_event, leave)


async def _final(
    builder: EventBuilder,
    results: AsyncIterator[Output],
    looped: AsyncIterator[wire.Event] | None,
) -> wire.Response:
    if looped is not None:  # the MCP tool loop: its events fill the builder's response
        async for _ in looped:
            pass
        return builder.response
    builder.start()
    async for output in results:
        builder.feed(output)
    return builder.response


def _sse(event: wire.Event) -> ServerSentEventMessage:
    data = msgspec.json.encode(event).decode()
    return ServerSentEventMessage(event=type(event).__struct_config__.tag, data=data)


async def _events(
    builder: EventBuilder,
    outputs: AsyncIterator[Output],
    keep: Callable[[wire.Response], Awaitable[None]],
    looped: AsyncIterator[wire.Event] | None,
) -> AsyncIterator[ServerSentEventMessage]:
    async for event in looped or _fed(builder, outputs):
        if isinstance(event, wire.ResponseCompleted | wire.ResponseIncomplete):
            # Stored before it is announced: a save that fails ends the stream with
            # `error` instead of `response.completed`.
            await keep(builder.response)
        yield _sse(event)


async def _fed(builder: EventBuilder, outputs: AsyncIterator[Output]) -> AsyncIterator[wire.Event]:
    for event in builder.start():
        yield event
    async for output in outputs:
        for event in builder.feed(output):
            yield event


ROUTES = [responses, *stored_responses.ROUTES]
