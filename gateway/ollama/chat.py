"""The Ollama protocol: chat and generate as NDJSON streams (the model routes: `ollama_models`)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec
from litestar import Request, Response, post
from msgspec.structs import replace

from engines.chat import serve_chat
from engines.errors import BadRequest
from gateway.canonical.dropped_tools import tell_dropped_tools
from gateway.canonical.images import fetch_images, image_part, message_with_parts
from gateway.control.registry import Generation, Route
from gateway.http.body import decode_body
from gateway.http.request_state import client_of
from gateway.http.streaming import (
    Streamed,
    collect,
    started,
    stream_body,
    unless_client_leaves,
)
from gateway.mcp.loop import run_each
from gateway.mcp.offered import OfferedTools, offered_tools
from gateway.ollama.controls import controls, wire_logprobs
from gateway.ollama.models import json_reply, now, ollama_route
from gateway.ollama.options import keep, options
from schemas import ollama as wire
from schemas.canonical import (
    ChatAsk,
    Effort,
    Finished,
    Logprobs,
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

NDJSON = "application/x-ndjson"

# A frame turns output into one reply object: text, tool calls, the Finished on the last,
# and the model's thinking.
Frame = Callable[[str, list[ToolCall], Finished | None, str], wire.Answer]


def _refuse_unsupported(
    suffix: str | None = None,
    template: str | None = None,
) -> None:
    if suffix:
        raise BadRequest("suffix (fill-in-the-middle) is not supported")
    if template:
        raise BadRequest("template overrides are not supported: the model's own template applies")


def effort(think: wire.Think) -> Effort | None:
    """Ollama's `think` as the gateway's effort; absent leaves the model's default."""
    if think is None:
        return None
    if isinstance(think, bool):
        return "medium" if think else "off"
    return think


def to_messages(messages: list[wire.Message]) -> list[Message]:
    """Ollama messages as canonical ones.

    Ollama's tool calls carry no ids, so each gets one here, and the tool turns after an
    assistant turn answer its calls in order (what templates that want ids need).
    """
    canonical: list[Message] = []
    pending: deque[ToolCall] = deque()
    for i, message in enumerate(messages):
        calls = [
            ToolCall(
                id=f"call_{i}_{j}",
                name=call.function.name,
                arguments=msgspec.json.encode(call.function.arguments).decode(),
            )
            for j, call in enumerate(message.tool_calls or [])
        ]
        if calls:
            pending = deque(calls)
        answered = pending.popleft() if message.role == "tool" and pending else None
        canonical.append(
            with_images(
                message.role,
                message.content or "",
                message.images,
                f"$.messages[{i}].images",
                tool_calls=calls,
                tool_call_id=answered.id if answered else None,
                name=message.tool_name or (answered.name if answered else None),
            )
        )
    return canonical


def with_images(role: str, text: str, images: list[str] | None, where: str, **fields) -> Message:
    """A message with Ollama's base64 `images`, placed before its text as Ollama does."""
    if not images:
        return Message(role=role, content=text, **fields)
    parts: list[Part] = [image_part(image, f"{where}[{k}]") for k, image in enumerate(images)]
    return message_with_parts(role, [*parts, TextPart(text=text)], **fields)


def _reply_calls(calls: list[ToolCall]) -> list[wire.ReplyToolCall] | None:
    """Canonical tool calls in Ollama's shape: arguments as an object, not JSON text."""
    replies = []
    for call in calls:
        try:
            arguments = msgspec.json.decode(call.arguments, type=dict[str, Any])
        except msgspec.DecodeError:
            # Ollama's arguments are an object; text that is not one (a parser passed it
            # through) has no faithful form here. Repairing it is guardrails.tool_calls' job.
            arguments = {}
        replies.append(
            wire.ReplyToolCall(function=wire.ReplyFunction(name=call.name, arguments=arguments))
        )
    return replies or None


def _final(finished: Finished | None, started_ns: int) -> dict[str, Any]:
    """The counts Ollama puts on the last object, from the engine's own accounting."""
    if finished is None:
        return {}
    return {
        "done_reason": "length" if finished.stop_reason == "length" else "stop",
        "total_duration": time.perf_counter_ns() - started_ns,
        "load_duration": 0,
        "prompt_eval_count": finished.prompt_tokens,
        "prompt_eval_duration": round(finished.prefill_s * 1e9),
        "eval_count": finished.new_tokens,
        "eval_duration": round(finished.decode_s * 1e9),
    }


async def _answer(
    request: Request,
    route: Route,
    ask: ChatAsk,
    stream: bool,
    frame: Frame,
    mcp: OfferedTools | None = None,
) -> Response | Streamed:
    ask = replace(ask, client=client_of(request))
    chat, answers, _ = await serve_chat(route.runner, ask)
    (results,) = run_each(answers, route.runner, ask, mcp) if mcp else answers
    tell_dropped_tools(request, chat)
    if not stream:
        whole = await unless_client_leaves(request, collect(results))
        reply = frame(whole.text, whole.tool_calls, whole.finished, whole.reasoning)
        reply.logprobs = wire_logprobs(whole.logprobs)
        return json_reply(reply)
    outputs = await started(request, results)
    lines = (_line(output, frame) async for output in outputs)
    return Streamed(stream_body(request, lines, _error_line, outputs.aclose), media_type=NDJSON)


def _line(output: Output, frame: Frame) -> bytes:
    if isinstance(output, TextDelta):
        reply = frame(output.text, [], None, "")
    elif isinstance(output, ReasoningDelta):
        reply = frame("", [], None, output.text)
    elif isinstance(output, ToolCallOutput):
        reply = frame("", [output.call], None, "")
    elif isinstance(output, Logprobs):
        reply = frame("", [], None, "")
        reply.logprobs = wire_logprobs(output.tokens)
    else:
        reply = frame("", [], output, "")
    return msgspec.json.encode(reply) + b"\n"


def _error_line(_status: int, message: str, _kind: str) -> bytes:
    """Past the status line Ollama reports a failure as a last `{"error"}` object."""
    return msgspec.json.encode({"error": message}) + b"\n"


@post("/api/chat", status_code=200)
async def chat(request: Request, generation: Generation) -> Response | Streamed:
    """Chat; an NDJSON stream unless `stream: false`. No messages: load the model."""
    started = time.perf_counter_ns()
    data = await decode_body(request, wire.ChatRequest)
    output = controls(data.format, data.logprobs, data.top_logprobs)
    route = ollama_route(generation, data.model, data.stream)
    await keep(route.runner, data.keep_alive)
    served = route.served

    def frame(
        text: str, calls: list[ToolCall], finished: Finished | None, thinking: str
    ) -> wire.ChatAnswer:
        message = wire.ReplyMessage(
            role="assistant",
            content=text,
            thinking=thinking or None,
            tool_calls=_reply_calls(calls),
        )
        return wire.ChatAnswer(
            model=served,
            created_at=now(),
            message=message,
            done=finished is not None,
            **_final(finished, started),
        )

    if not data.messages:
        message = wire.ReplyMessage(role="assistant", content="")
        loaded = wire.ChatAnswer(
            model=served, created_at=now(), message=message, done=True, done_reason="load"
        )
        if await keep(route.runner, data.keep_alive, now=True):
            loaded.done_reason = "unload"
        return json_reply(loaded)
    tools = [
        ToolSpec(
            name=t.function.name,
            description=t.function.description,
            parameters=t.function.parameters,
        )
        for t in data.tools or []
    ]
    # The model's `tools_from` tools, after the client's (gateway/mcp/offered.py).
    mcp = await offered_tools(request, route.model, {t.name for t in tools})
    tools += mcp.specs
    messages = await fetch_images(request, to_messages(data.messages), generation.config.server)
    chat = ChatAsk(
        messages=messages,
        tools=tools,
        reasoning=effort(data.think),
        controls=output,
        **options(data.options),
    )
    return await _answer(request, route, chat, data.stream, frame, mcp)


@post("/api/generate", status_code=200)
async def generate(request: Request, generation: Generation) -> Response | Streamed:
    """Completion of a prompt (templated unless `raw`); an empty prompt loads the model."""
    started = time.perf_counter_ns()
    data = await decode_body(request, wire.GenerateRequest)
    _refuse_unsupported(data.suffix, data.template)
    output = controls(data.format, data.logprobs, data.top_logprobs)
    route = ollama_route(generation, data.model, data.stream)
    await keep(route.runner, data.keep_alive)
    served = route.served

    def frame(
        text: str, _calls: list[ToolCall], finished: Finished | None, thinking: str
    ) -> wire.GenerateAnswer:
        return wire.GenerateAnswer(
            model=served,
            created_at=now(),
            response=text,
            thinking=thinking or None,
            done=finished is not None,
            **_final(finished, started),
        )

    if not data.prompt:
        loaded = wire.GenerateAnswer(
            model=served, created_at=now(), response="", done=True, done_reason="load"
        )
        if await keep(route.runner, data.keep_alive, now=True):
            loaded.done_reason = "unload"
        return json_reply(loaded)
    if data.raw:  # no template, and so no system prompt either
        if data.images:
            raise BadRequest("$.images: a raw prompt has no template to place images in")
        chat = ChatAsk(
            messages=[], raw_prompt=data.prompt, controls=output, **options(data.options)
        )
    else:
        system = [Message(role="system", content=data.system)] if data.system else []
        user = with_images("user", data.prompt, data.images, "$.images")
        prompt = await fetch_images(request, [*system, user], generation.config.server)
        chat = ChatAsk(
            messages=prompt, reasoning=effort(data.think), controls=output, **options(data.options)
        )
    return await _answer(request, route, chat, data.stream, frame)


ROUTES = [chat, generate]
