"""OpenAI chat completions, plain and SSE."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import msgspec
from litestar import Request, Response, post
from litestar.response import Stream
from msgspec import UNSET

from engines.chat import check_n, serve_chat
from engines.errors import BadRequest
from gateway.canonical.choices import collect_all, merged, refuse_set
from gateway.canonical.dropped_tools import tell_dropped_tools
from gateway.canonical.images import fetch_images, image_part, message_with_parts
from gateway.control.registry import Generation, announce
from gateway.http.body import decode_body
from gateway.http.request_state import client_of
from gateway.http.streaming import Collected, sse_response, started, unless_client_leaves
from gateway.mcp.loop import run_each
from gateway.mcp.offered import offered_tools
from gateway.openai.controls import (
    controls,
    logprobs_request,
    output_format,
    sampling_asked,
    tool_choice,
    wire_logprobs,
)
from gateway.openai.errors import envelope
from schemas import openai as wire
from schemas.canonical import (
    ChatAsk,
    Finished,
    Logprobs,
    Message,
    Output,
    OutputControls,
    Part,
    ReasoningDelta,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallOutput,
    ToolSpec,
)

FINISH_REASONS = {
    "stop": "stop",
    "stop_string": "stop",
    "cancelled": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
}


def to_messages(messages: list[wire.ChatMessage]) -> list[Message]:
    canonical = []
    for i, message in enumerate(messages):
        calls = [
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments)
            for c in message.tool_calls or []
        ]
        fields = {"tool_calls": calls, "tool_call_id": message.tool_call_id, "name": message.name}
        content = message.content
        if isinstance(content, list):
            parts = [_part(part, f"$.messages[{i}].content[{j}]") for j, part in enumerate(content)]
            canonical.append(message_with_parts(message.role, parts, **fields))
        else:
            canonical.append(Message(role=message.role, content=content or "", **fields))
    return canonical


def _part(part: wire.ContentPart, where: str) -> Part:
    """A text part, or an `image_url` part (data URL, or http(s) when fetching is on)."""
    if part.type == "text":
        return TextPart(text=part.text or "")
    if part.type == "image_url":
        image = part.image_url
        if image is None:
            raise BadRequest(f"{where}.image_url: an image_url part needs its url")
        if isinstance(image, str):
            return image_part(image, f"{where}.image_url")
        return image_part(image.url, f"{where}.image_url", image.detail)
    raise BadRequest(f"{where}: content parts of type {part.type!r} are not supported")


def to_tools(tools: list[wire.Tool] | None) -> list[ToolSpec]:
    return [
        ToolSpec(
            name=t.function.name,
            description=t.function.description,
            parameters=t.function.parameters,
        )
        for t in tools or []
    ]


def effort(asked: str | None):
    """OpenAI's `reasoning_effort` as the gateway's effort; None leaves the model's default."""
    return None if asked is None else wire.EFFORTS.get(asked, asked)


def wire_tool_call(call: ToolCall) -> wire.ToolCall:
    return wire.ToolCall(
        id=call.id, function=wire.FunctionCall(name=call.name, arguments=call.arguments)
    )


# Fields OpenAI defines that this gateway cannot honour: a 400 naming each when set to
# anything but its no-op value. (Penalties of 0 change nothing; "text" is the only modality.)
REFUSED = {
    "prediction": lambda v: True,
    "modalities": lambda v: v != ["text"],
    "audio": lambda v: True,
    "web_search_options": lambda v: True,
    "functions": lambda v: True,
    "function_call": lambda v: True,
    "store": bool,
    "service_tier": lambda v: v not in ("auto", "default"),
    "verbosity": lambda v: v != "medium",
}


def chat_controls(
    data: wire.ChatCompletionRequest, mcp: list[ToolSpec] = ()
) -> tuple[list[ToolSpec], OutputControls]:
    """The tools the model is offered (the client's, then the model's `tools_from` ones) and
    the request's output controls, canonical."""
    asked = data.response_format
    fmt = None
    if asked is not None:
        schema = asked.json_schema.schema if asked.json_schema else None
        if asked.type == "json_schema" and asked.json_schema is None:
            raise BadRequest("$.response_format.json_schema is required for type json_schema")
        fmt = output_format(asked.type, schema, "$.response_format.json_schema")
        if asked.type == "json_object":
            fmt = output_format(asked.type, None, "$.response_format")
    tools, choice, forced = tool_choice(data.tool_choice, [*to_tools(data.tools), *mcp])
    strict = [t.function.name for t in data.tools or [] if t.function.strict]
    logprobs = logprobs_request(data.logprobs, data.top_logprobs, "$.top_logprobs")
    return tools, controls(
        format=fmt,
        choice=choice,
        forced=forced,
        tools=tools,
        strict=strict,
        parallel=data.parallel_tool_calls,
        logprobs=logprobs,
    )


@post("/v1/chat/completions", status_code=200)
async def chat_completions(request: Request, generation: Generation) -> Response | Stream:
    """Chat completions; `stream: true` answers as server-sent events."""
    data = await decode_body(request, wire.ChatCompletionRequest)
    refuse_set(data, REFUSED)
    route = announce(generation.resolve(data.model), stream=data.stream, protocol="openai")
    route = generation.with_lora(route, data.lora)
    n = check_n(route.model, data.n)
    stop = [data.stop] if isinstance(data.stop, str) else data.stop
    messages = await fetch_images(request, to_messages(data.messages), generation.config.server)
    declared = {t.function.name for t in data.tools or []}
    mcp = await offered_tools(request, route.model, declared)
    tools, output = chat_controls(data, mcp.specs)
    ask = ChatAsk(
        messages=messages,
        max_tokens=data.max_completion_tokens or data.max_tokens,
        **sampling_asked(data),
        stop=stop,
        tools=tools,
        reasoning=effort(data.reasoning_effort),
        controls=output,
        client=client_of(request),
    )
    chat, streams, _ = await serve_chat(route.runner, ask, n)
    streams = run_each(streams, route.runner, ask, mcp)  # run_tools: the gateway's loop
    tell_dropped_tools(request, chat)
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    if not data.stream:
        wholes = await unless_client_leaves(request, collect_all(streams))
        body = wire.ChatCompletion(
            id=completion_id,
            created=created,
            model=route.served,
            choices=[
                _choice(i, whole, bool(chat.controls.logprobs)) for i, whole in enumerate(wholes)
            ],
            usage=_usage_of([w.finished for w in wholes]),
        )
        return Response(body)
    outputs = await started(request, merged(streams))
    include_usage = bool(data.stream_options and data.stream_options.include_usage)
    chunks = _chunks(outputs, n, completion_id, created, route.served, include_usage)
    return sse_response(request, chunks, error_chunk, outputs.aclose)


def _choice(index: int, whole: Collected, logprobs: bool) -> wire.Choice:
    return wire.Choice(
        index=index,
        message=wire.AssistantMessage(
            content=whole.text if whole.text or not whole.tool_calls else None,
            tool_calls=[wire_tool_call(c) for c in whole.tool_calls] or UNSET,
            reasoning_content=whole.reasoning or UNSET,
        ),
        finish_reason=FINISH_REASONS[whole.finished.stop_reason],
        logprobs=wire.ChoiceLogprobs(content=wire_logprobs(whole.logprobs)) if logprobs else None,
    )


def _usage_of(finished: list[Finished]) -> wire.Usage:
    # The prompt is counted once, as OpenAI counts it for n choices (and its cache read).
    prompt = finished[0].prompt_tokens
    new = sum(f.new_tokens for f in finished)
    return wire.Usage(
        prompt_tokens=prompt,
        completion_tokens=new,
        total_tokens=prompt + new,
        prompt_tokens_details=wire.PromptTokensDetails(
            cached_tokens=finished[0].reused_prefix_tokens
        ),
    )


async def _chunks(
    outputs: AsyncIterator[tuple[int, Output]],
    n: int,
    completion_id: str,
    created: int,
    model: str,
    include_usage: bool,
) -> AsyncIterator[str]:
    def chunk(
        index: int = 0, delta: wire.Delta | None = None, finish=None, usage=UNSET, logprobs=None
    ) -> str:
        choice = wire.ChunkChoice(
            index=index, delta=delta or wire.Delta(), finish_reason=finish, logprobs=logprobs
        )
        body = wire.ChatCompletionChunk(
            id=completion_id,
            created=created,
            model=model,
            usage=usage,
            choices=[] if usage else [choice],
        )
        return msgspec.json.encode(body).decode()

    for index in range(n):
        yield chunk(index, wire.Delta(role="assistant", content=""))
    calls = [0] * n
    finished: list[Finished] = []
    async for index, output in outputs:
        if isinstance(output, TextDelta):
            yield chunk(index, wire.Delta(content=output.text))
        elif isinstance(output, ReasoningDelta):
            yield chunk(index, wire.Delta(reasoning_content=output.text))
        elif isinstance(output, Logprobs):
            content = wire.ChoiceLogprobs(content=wire_logprobs(output.tokens))
            yield chunk(index, logprobs=content)
        elif isinstance(output, ToolCallOutput):
            call = output.call
            function = wire.FunctionCallDelta(name=call.name, arguments=call.arguments)
            delta = wire.ToolCallDelta(index=calls[index], id=call.id, function=function)
            yield chunk(index, wire.Delta(tool_calls=[delta]))
            calls[index] += 1
        elif isinstance(output, Finished):
            finished.append(output)
            yield chunk(index, finish=FINISH_REASONS[output.stop_reason])
    if include_usage:
        yield chunk(usage=_usage_of(finished))
    yield "[DONE]"


def error_chunk(status: int, message: str, kind: str) -> str:
    """A failure after the 200 went out, as OpenAI reports it: a chunk holding `error`."""
    return msgspec.json.encode(envelope(status, message, kind)).decode()


ROUTES = [chat_completions]
