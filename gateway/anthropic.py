"""The Anthropic Messages protocol: messages (plain and SSE), token counting, `claude-` names."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import msgspec
from litestar import Request, Response, post
from litestar.response import ServerSentEvent
from litestar.response.sse import ServerSentEventMessage

from engines.errors import BadRequest, GatewayError
from engines.log import emit
from engines.policy import answer
from gateway.body import decode_body
from gateway.canonical import build_chat_request
from gateway.errors import error_body
from gateway.registry import Generation, Route
from gateway.streaming import Collected, collect, unless_client_leaves
from schemas import anthropic as wire
from schemas.canonical import (
    ChatRequest,
    Effort,
    Finished,
    Message,
    Output,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolSpec,
)
from schemas.events import RequestRouted

# Claude Code only offers models whose names look like Claude's: every chat model also
# answers to `claude-<id or alias>`.
CLAUDE_PREFIX = "claude-"

# Anthropic's convention for a model whose release date is unknown: the epoch.
UNKNOWN_DATE = "1970-01-01T00:00:00Z"

STOP_REASONS = {
    "stop": "end_turn",
    "cancelled": "end_turn",
    "length": "max_tokens",
    "stop_string": "stop_sequence",
    "tool_calls": "tool_use",
}


def resolve(generation: Generation, name: str) -> Route:
    """A model id or alias; else `claude-<id or alias>`; else the fallback, else 404."""
    if not _known(generation, name) and name.startswith(CLAUDE_PREFIX):
        bare = name.removeprefix(CLAUDE_PREFIX)
        if _known(generation, bare):
            return generation.resolve(bare)._replace(requested=name, alias=name)
    return generation.resolve(name)


def _known(generation: Generation, name: str) -> bool:
    return any(name == m.id or name in m.aliases for m in generation.config.models)


def model_page(generation: Generation) -> wire.ModelPage:
    """The model list in Anthropic's shape: each chat model and alias, and its `claude-` name."""
    cards = []
    for model in generation.config.models:
        if model.task == "embed":
            continue
        for name in (model.id, *model.aliases):
            claude = name if name.startswith(CLAUDE_PREFIX) else CLAUDE_PREFIX + name
            for shown in dict.fromkeys((name, claude)):
                cards.append(wire.ModelInfo(id=shown, display_name=name, created_at=UNKNOWN_DATE))
    return wire.ModelPage(
        data=cards,
        first_id=cards[0].id if cards else None,
        last_id=cards[-1].id if cards else None,
    )


def to_messages(data: wire.PromptRequest) -> list[Message]:
    """Anthropic's system and turns as canonical messages; tool results become `tool` turns."""
    canonical = []
    if data.system:
        canonical.append(Message(role="system", content=_join(data.system)))
    names: dict[str, str] = {}  # tool_use id -> tool name, for the results that answer them
    for turn in data.messages:
        if isinstance(turn.content, str):
            canonical.append(Message(role=turn.role, content=turn.content))
            continue
        texts: list[str] = []
        calls: list[ToolCall] = []
        answered = False  # a user turn of tool results only needs no empty user message
        for block in turn.content:
            if isinstance(block, wire.TextBlock):
                texts.append(block.text)
            elif isinstance(block, wire.ToolUseBlock):
                if turn.role != "assistant":
                    raise BadRequest("tool_use blocks belong in assistant messages")
                names[block.id] = block.name
                calls.append(
                    ToolCall(id=block.id, name=block.name, arguments=json.dumps(block.input))
                )
            elif isinstance(block, wire.ToolResultBlock):
                if turn.role != "user":
                    raise BadRequest("tool_result blocks belong in user messages")
                if texts:  # keep the order the client wrote
                    canonical.append(Message(role="user", content=_join(texts)))
                    texts = []
                canonical.append(_tool_result(block, names.get(block.tool_use_id)))
                answered = True
            elif isinstance(block, wire.ImageBlock | wire.DocumentBlock):
                raise BadRequest(f"{block.__struct_config__.tag} content blocks are not supported")
            # thinking and redacted_thinking: earlier reasoning is not replayed to the model.
        if turn.role == "assistant":
            canonical.append(Message(role="assistant", content=_join(texts), tool_calls=calls))
        elif texts or not answered:
            canonical.append(Message(role="user", content=_join(texts)))
    return canonical


def _tool_result(block: wire.ToolResultBlock, name: str | None) -> Message:
    content = block.content
    if not isinstance(content, str):
        if any(not isinstance(part, wire.TextBlock) for part in content):
            raise BadRequest("tool_result content supports text blocks only")
        content = _join(content)
    if block.is_error:  # the model should know the call failed, not only what it printed
        content = f"Error: {content}"
    return Message(role="tool", content=content, tool_call_id=block.tool_use_id, name=name)


def _join(parts: str | list[str] | list[wire.TextBlock]) -> str:
    # Separate blocks are separate pieces of text (Claude Code sends reminders and the user's
    # words as separate blocks): a blank line keeps them apart.
    if isinstance(parts, str):
        return parts
    return "\n\n".join(p.text if isinstance(p, wire.TextBlock) else p for p in parts)


def to_chat(route: Route, data: wire.PromptRequest) -> ChatRequest:
    """The canonical request; sampling fields only where the request is a messages request."""
    tools = []
    if not (data.tool_choice and data.tool_choice.type == "none"):
        # Server tools (web search, ...) run at Anthropic; there is nothing here to run them.
        tools = [
            ToolSpec(name=t.name, description=t.description, parameters=t.input_schema)
            for t in data.tools
            if t.type in (None, "custom")
        ]
    sampling = {}
    if isinstance(data, wire.MessagesRequest):
        sampling = dict(
            max_tokens=data.max_tokens,
            temperature=data.temperature,
            top_p=data.top_p,
            top_k=data.top_k,
            stop=data.stop_sequences,
        )
    reasoning = effort(data.thinking)
    return build_chat_request(
        route.model, to_messages(data), tools=tools, reasoning=reasoning, **sampling
    )


# Anthropic's thinking budget read as an effort: below 4k tokens is low, below 16k medium.
BUDGET_EFFORTS = ((4096, "low"), (16384, "medium"))

# Thinking blocks carry a signature for Anthropic to verify when they are sent back; nothing
# here verifies them (earlier thinking is not replayed), so it is empty.
NO_SIGNATURE = ""


def effort(thinking: wire.ThinkingConfig | None) -> Effort | None:
    """`thinking` as the gateway's effort; None (absent) leaves the model's default."""
    if thinking is None:
        return None
    if thinking.type == "disabled":
        return "off"
    if thinking.type == "enabled" and thinking.budget_tokens:
        return next((e for cap, e in BUDGET_EFFORTS if thinking.budget_tokens < cap), "high")
    return "medium"  # enabled without a budget, adaptive, and kinds yet to come


def tool_input(arguments: str) -> dict:
    """A call's arguments as the object Anthropic's `input` must be (malformed ones are the
    tool_calls guardrail's to repair upstream; what still fails to parse becomes `{}`)."""
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def stop_of(finished: Finished, has_calls: bool, stops: list[str]) -> tuple[str, str | None]:
    """Anthropic's stop_reason and stop_sequence for the engine's canonical stop reason."""
    if has_calls and finished.stop_reason in ("stop", "tool_calls"):
        return "tool_use", None
    reason = STOP_REASONS[finished.stop_reason]
    # The engine says a stop string matched, not which; with one asked for, it is that one.
    matched = stops[0] if reason == "stop_sequence" and len(stops) == 1 else None
    return reason, matched


def _routed(route: Route, stream: bool) -> None:
    emit(
        RequestRouted(
            requested=route.requested,
            served=route.served,
            alias=route.alias,
            fallback=route.fallback,
            stream=stream,
            protocol="anthropic",
        )
    )


@post("/v1/messages", status_code=200)
async def create_message(request: Request, generation: Generation) -> Response | ServerSentEvent:
    """A Messages API answer; `stream: true` answers as Anthropic's server-sent events."""
    data = await decode_body(request, wire.MessagesRequest)
    route = resolve(generation, data.model)
    _routed(route, data.stream)
    chat = to_chat(route, data)
    runner = route.runner
    results = answer(runner, chat)
    message_id = f"msg_{uuid.uuid4().hex[:24]}"
    if not data.stream:
        whole = await unless_client_leaves(request, collect(results))
        return Response(_message(message_id, route.served, whole, chat.stop))
    try:
        # Wait for the first output before answering, so queue and load errors keep their status.
        first = await unless_client_leaves(request, anext(results))
        # message_start carries the prompt's size before the engine's own count is known.
        if isinstance(first, Finished):
            input_tokens = first.prompt_tokens
        else:
            input_tokens = await unless_client_leaves(request, runner.count_prompt(chat))
    except BaseException:
        await results.aclose()
        raise
    start = wire.Message(
        id=message_id,
        model=route.served,
        content=[],
        usage=wire.Usage(input_tokens=input_tokens, output_tokens=0),
    )
    return ServerSentEvent(_events(request, start, first, results, chat.stop))


def _message(message_id: str, model: str, answer: Collected, stops: list[str]) -> wire.Message:
    """The whole answer as one Message: a text block (unless only tools were called), then
    a tool_use block per call."""
    blocks: list = (
        [wire.ThinkingBlock(thinking=answer.reasoning, signature=NO_SIGNATURE)]
        if answer.reasoning
        else []
    )
    if answer.text or not answer.tool_calls:
        blocks.append(wire.TextBlock(text=answer.text))
    blocks += [
        wire.ToolUseBlock(id=c.id, name=c.name, input=tool_input(c.arguments))
        for c in answer.tool_calls
    ]
    reason, matched = stop_of(answer.finished, bool(answer.tool_calls), stops)
    finished = answer.finished
    return wire.Message(
        id=message_id,
        model=model,
        content=blocks,
        stop_reason=reason,
        stop_sequence=matched,
        usage=wire.Usage(input_tokens=finished.prompt_tokens, output_tokens=finished.new_tokens),
    )


class Framer:
    """Turns the canonical output stream into Anthropic's stream events, block by block.

    Text opens a text block at its first non-empty delta; each tool call is a whole tool_use
    block (one `input_json_delta`); a `ping` follows the first block's start, as Anthropic's.
    """

    def __init__(self, stops: list[str]) -> None:
        self._stops = stops
        self._index = -1
        self._text_open = False
        self._thinking_open = False
        self._calls = 0

    def feed(self, output: Output) -> list[wire.StreamEvent]:
        if isinstance(output, ReasoningDelta):
            return self._thinking(output.text)
        events: list[wire.StreamEvent] = self._close_thinking()
        if isinstance(output, TextDelta):
            if output.text:
                if not self._text_open:
                    events += self._open(wire.TextBlock(text=""))
                    self._text_open = True
                delta = wire.TextDelta(text=output.text)
                events.append(wire.ContentBlockDelta(index=self._index, delta=delta))
        elif isinstance(output, Finished):
            if self._index < 0:  # an empty answer is still one (empty) text block
                events += self._open(wire.TextBlock(text=""))
                self._text_open = True
            events += self._close_text()
            reason, matched = stop_of(output, self._calls > 0, self._stops)
            events.append(
                wire.MessageDelta(
                    delta=wire.MessageDeltaBody(stop_reason=reason, stop_sequence=matched),
                    usage=wire.MessageDeltaUsage(
                        input_tokens=output.prompt_tokens, output_tokens=output.new_tokens
                    ),
                )
            )
            events.append(wire.MessageStop())
        else:  # a tool call
            call = output.call
            events += self._close_text()
            events += self._open(wire.ToolUseBlock(id=call.id, name=call.name, input={}))
            arguments = json.dumps(tool_input(call.arguments))
            delta = wire.InputJsonDelta(partial_json=arguments)
            events.append(wire.ContentBlockDelta(index=self._index, delta=delta))
            events.append(wire.ContentBlockStop(index=self._index))
            self._calls += 1
        return events

    def _thinking(self, text: str) -> list[wire.StreamEvent]:
        events = self._close_text()
        if not self._thinking_open:
            events += self._open(wire.ThinkingBlock(thinking="", signature=NO_SIGNATURE))
            self._thinking_open = True
        delta = wire.ThinkingDelta(thinking=text)
        return [*events, wire.ContentBlockDelta(index=self._index, delta=delta)]

    def _close_thinking(self) -> list[wire.StreamEvent]:
        """A thinking block ends with its signature, as Anthropic's do."""
        if not self._thinking_open:
            return []
        self._thinking_open = False
        signature = wire.SignatureDelta(signature=NO_SIGNATURE)
        return [
            wire.ContentBlockDelta(index=self._index, delta=signature),
            wire.ContentBlockStop(index=self._index),
        ]

    def _open(self, block: wire.Block) -> list[wire.StreamEvent]:
        self._index += 1
        events: list[wire.StreamEvent] = [
            wire.ContentBlockStart(index=self._index, content_block=block)
        ]
        return events + [wire.Ping()] if self._index == 0 else events

    def _close_text(self) -> list[wire.StreamEvent]:
        if not self._text_open:
            return []
        self._text_open = False
        return [wire.ContentBlockStop(index=self._index)]


def sse(event: wire.StreamEvent) -> ServerSentEventMessage:
    """One event as SSE: its `event:` name is its type."""
    name = type(event).__struct_config__.tag
    return ServerSentEventMessage(event=name, data=msgspec.json.encode(event).decode())


async def _events(
    request: Request,
    start: wire.Message,
    first: Output,
    results: AsyncIterator[Output],
    stops: list[str],
) -> AsyncIterator[ServerSentEventMessage]:
    framer = Framer(stops)
    try:
        yield sse(wire.MessageStart(message=start))
        output = first
        while True:
            for event in framer.feed(output):
                yield sse(event)
            if isinstance(output, Finished):
                return
            output = await anext(results)
    except Exception as error:  # the 200 is out: only an error event can tell the client
        yield _error_event(request, error)
    finally:
        # The client went away (or the stream ended): stop the job within a token.
        await results.aclose()


def _error_event(request: Request, error: Exception) -> ServerSentEventMessage:
    """A failure after the 200 went out, as Anthropic reports it: an `error` event."""
    if isinstance(error, GatewayError):
        status, message = error.status, error.message
    else:
        status, message = 500, "internal error"
    request.scope.setdefault("state", {})["error"] = f"mid-stream: {error!r}"
    body = error_body("anthropic", status, message)
    return ServerSentEventMessage(event="error", data=msgspec.json.encode(body).decode())


@post("/v1/messages/count_tokens", status_code=200)
async def count_tokens(request: Request, generation: Generation) -> wire.TokenCount:
    """Tokens in the prompt as the model will see it (template, system, tools included)."""
    data = await decode_body(request, wire.CountTokensRequest)
    route = resolve(generation, data.model)
    _routed(route, stream=False)
    chat = to_chat(route, data)
    counted = await unless_client_leaves(request, route.runner.count_prompt(chat))
    return wire.TokenCount(input_tokens=counted)


ROUTES = [create_message, count_tokens]
