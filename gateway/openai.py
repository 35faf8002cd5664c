"""The OpenAI protocol: chat completions (plain and SSE) and the model list."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import msgspec
from litestar import Request, Response, get, post
from litestar.response import ServerSentEvent
from msgspec import UNSET

from engines.errors import BadRequest
from engines.policy.answer import answer
from gateway import model_cards
from gateway.anthropic import model_page
from gateway.body import decode_body
from gateway.chat_request import build_chat_request
from gateway.errors import error_body, stream_failure
from gateway.images import image_part, message_with_parts, resolve_images
from gateway.registry import Generation, announce
from gateway.streaming import collect, unless_client_leaves
from schemas import openai as wire
from schemas.anthropic import ModelPage
from schemas.canonical import (
    Finished,
    Message,
    Output,
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


def _usage(finished: Finished) -> wire.Usage:
    return wire.Usage(
        prompt_tokens=finished.prompt_tokens,
        completion_tokens=finished.new_tokens,
        total_tokens=finished.prompt_tokens + finished.new_tokens,
    )


@post("/v1/chat/completions", status_code=200)
async def chat_completions(request: Request, generation: Generation) -> Response | ServerSentEvent:
    """Chat completions; `stream: true` answers as server-sent events."""
    data = await decode_body(request, wire.ChatCompletionRequest)
    if data.n not in (None, 1):
        raise BadRequest("n > 1 is not supported: send one request per completion ($.n)")
    if data.logprobs or data.top_logprobs:
        raise BadRequest("logprobs are not supported yet ($.logprobs, $.top_logprobs)")
    route = announce(generation.resolve(data.model), stream=data.stream, protocol="openai")
    stop = [data.stop] if isinstance(data.stop, str) else data.stop
    messages = await resolve_images(to_messages(data.messages), generation.config.server)
    chat = build_chat_request(
        route.model,
        messages,
        max_tokens=data.max_completion_tokens or data.max_tokens,
        temperature=data.temperature,
        top_p=data.top_p,
        top_k=data.top_k,
        min_p=data.min_p,
        seed=data.seed,
        stop=stop,
        tools=to_tools(data.tools),
        reasoning=effort(data.reasoning_effort),
    )
    results = answer(route.runner, chat)
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())
    if not data.stream:
        whole = await unless_client_leaves(request, collect(results))
        text, finished = whole.text, whole.finished
        body = wire.ChatCompletion(
            id=completion_id,
            created=created,
            model=route.served,
            choices=[
                wire.Choice(
                    message=wire.AssistantMessage(
                        content=text if text or not whole.tool_calls else None,
                        tool_calls=[wire_tool_call(c) for c in whole.tool_calls] or UNSET,
                        reasoning_content=whole.reasoning or UNSET,
                    ),
                    finish_reason=FINISH_REASONS[finished.stop_reason],
                )
            ],
            usage=_usage(finished),
        )
        return Response(body)
    # Wait for the first output before answering, so queue and load errors keep their status.
    first = await unless_client_leaves(request, anext(results))
    include_usage = bool(data.stream_options and data.stream_options.include_usage)
    chunks = _chunks(request, first, results, completion_id, created, route.served, include_usage)
    return ServerSentEvent(chunks)


async def _chunks(
    request: Request,
    first: Output,
    results: AsyncIterator[Output],
    completion_id: str,
    created: int,
    model: str,
    include_usage: bool,
) -> AsyncIterator[str]:
    def chunk(delta: wire.Delta, finish: str | None = None, usage=UNSET, choices=True) -> str:
        body = wire.ChatCompletionChunk(
            id=completion_id,
            created=created,
            model=model,
            usage=usage,
            choices=[wire.ChunkChoice(delta=delta, finish_reason=finish)] if choices else [],
        )
        return msgspec.json.encode(body).decode()

    async def outputs() -> AsyncIterator[Output]:
        yield first
        async for output in results:
            yield output

    try:
        yield chunk(wire.Delta(role="assistant", content=""))
        calls = 0
        async for output in outputs():
            if isinstance(output, TextDelta):
                yield chunk(wire.Delta(content=output.text))
            elif isinstance(output, ReasoningDelta):
                yield chunk(wire.Delta(reasoning_content=output.text))
            elif isinstance(output, ToolCallOutput):
                call = output.call
                function = wire.FunctionCallDelta(name=call.name, arguments=call.arguments)
                delta = wire.ToolCallDelta(index=calls, id=call.id, function=function)
                yield chunk(wire.Delta(tool_calls=[delta]))
                calls += 1
            elif isinstance(output, Finished):
                yield chunk(wire.Delta(), FINISH_REASONS[output.stop_reason])
                if include_usage:
                    yield chunk(wire.Delta(), usage=_usage(output), choices=False)
        yield "[DONE]"
    except Exception as error:
        # The 200 is out: OpenAI reports a failure mid-stream as a chunk holding `error`.
        status, message, kind = stream_failure(request, error)
        yield msgspec.json.encode(error_body("openai", status, message, kind)).decode()
    finally:
        # The client went away (or the stream ended): stop the job within a token.
        await results.aclose()


@get("/v1/models")
async def list_models(request: Request, generation: Generation) -> wire.ModelList | ModelPage:
    """Every model id and alias this config generation answers to.

    Anthropic clients (Claude Code among them) send `anthropic-version` and get Anthropic's
    model page, which also lists each chat model under its `claude-` name.
    """
    if "anthropic-version" in request.headers:
        return model_page(generation)
    created = int(time.time())
    cards = []
    for model in generation.listed():
        cards.append(wire.ModelCard(id=model.id, created=created, aliases=list(model.aliases)))
        cards += [wire.ModelCard(id=a, created=created, alias_of=model.id) for a in model.aliases]
    return wire.ModelList(data=cards)


ROUTES = [chat_completions, list_models, *model_cards.ROUTES]
