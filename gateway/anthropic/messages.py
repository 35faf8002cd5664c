"""The Anthropic Messages protocol: messages (plain and SSE), token counting, `claude-` names."""

from __future__ import annotations

import json
import uuid

from litestar import Request, Response, post
from litestar.response import Stream
from msgspec.structs import replace

from engines.chat import count_chat, serve_chat
from engines.errors import BadRequest
from gateway.anthropic.cache_marks import keep_marks
from gateway.anthropic.models import resolve
from gateway.anthropic.stream import (
    NO_SIGNATURE,
    error_event,
    stop_of,
    stream_events,
    tool_input,
    usage_of,
)
from gateway.canonical.choices import refuse_set
from gateway.canonical.dropped_tools import tell_dropped_tools
from gateway.canonical.images import image_part, message_with_parts, resolve_images
from gateway.control.registry import Generation, announce
from gateway.http.body import decode_body
from gateway.http.request_state import client_of
from gateway.http.streaming import Collected, collect, sse_response, started, unless_client_leaves
from gateway.mcp.loop import run_each
from gateway.mcp.offered import offered_tools
from schemas import anthropic as wire
from schemas.canonical import (
    ChatAsk,
    Effort,
    Finished,
    ImagePart,
    Message,
    OutputControls,
    OutputFormat,
    Part,
    TextPart,
    ToolCall,
    ToolSpec,
)
from schemas.config import ServerConfig


def to_messages(data: wire.PromptRequest, starts: list[int] | None = None) -> list[Message]:
    """Anthropic's system and turns as canonical messages; tool results become `tool` turns.
    `starts` gets where each turn begins among them, and where the last one ends.

    `role: "system"` turns inside `messages` join the system prompt, in order: Claude Code
    sends its environment that way, after the user's words, and a small local model reads
    a system turn there as the thing to answer (SmolLM2 recites it); many chat templates
    take a system turn only first anyway.
    """
    canonical = []
    system = [_join(data.system)] if data.system else []
    system += [_system_text(t.content) for t in data.messages if t.role == "system"]
    if system:
        canonical.append(Message(role="system", content="\n\n".join(system)))
    names: dict[str, str] = {}  # tool_use id -> tool name, for the results that answer them
    for i, turn in enumerate(data.messages):
        if starts is not None:
            starts.append(len(canonical))
        if turn.role == "system":
            continue  # joined the system prompt above
        if isinstance(turn.content, str):
            canonical.append(Message(role=turn.role, content=turn.content))
            continue
        texts: list[str | ImagePart] = []  # text blocks, and images in their place
        calls: list[ToolCall] = []
        answered = False  # a user turn of tool results only needs no empty user message
        for j, block in enumerate(turn.content):
            if isinstance(block, wire.TextBlock):
                texts.append(block.text)
            elif isinstance(block, wire.ImageBlock) and turn.role == "user":
                texts.append(_image(block, f"$.messages[{i}].content[{j}].source"))
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
                    canonical.append(_user(texts))
                    texts = []
                canonical.append(_tool_result(block, names.get(block.tool_use_id)))
                answered = True
            elif isinstance(block, wire.ImageBlock | wire.DocumentBlock):
                raise BadRequest(_unreadable(block))
            # thinking and redacted_thinking: earlier reasoning is not replayed to the model.
        if turn.role == "assistant":
            canonical.append(Message(role="assistant", content=_join(texts), tool_calls=calls))
        elif texts or not answered:
            canonical.append(_user(texts))
    if starts is not None:
        starts.append(len(canonical))
    return canonical


# Anthropic's own wording first: Claude Code matches it, then drops the images or documents
# from the conversation and sends it again, instead of stopping.
UNREADABLE = {
    "image": "Could not process image: this model reads text only",
    "document": "Could not process PDF: this model does not support PDF input",
}


def _unreadable(block: wire.ImageBlock | wire.DocumentBlock) -> str:
    tag = block.__struct_config__.tag
    return f"{UNREADABLE[tag]} ({tag} content blocks are not supported)"


def _system_text(content: str | list[wire.InputBlock]) -> str:
    """A system turn's text; it holds text blocks only, as Anthropic's system prompt does."""
    if isinstance(content, str):
        return content
    if any(not isinstance(block, wire.TextBlock) for block in content):
        raise BadRequest("system messages may only contain text blocks")
    return _join(content)


def _could_not(refused: BadRequest) -> BadRequest:
    """An image refusal in Anthropic's wording (Claude Code drops the images and retries)."""
    if refused.message.startswith("Could not process image"):
        return refused
    return BadRequest(f"Could not process image: {refused.message}")


def _image(block: wire.ImageBlock, where: str) -> ImagePart:
    """An image block's `base64` or `url` source."""
    source = block.source if isinstance(block.source, dict) else {}
    try:
        if source.get("type") == "base64" and isinstance(source.get("data"), str):
            return image_part(source["data"], f"{where}.data")
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            if not source["url"].startswith(("http://", "https://")):
                raise BadRequest(f"{where}.url: an image url source must be http(s)")
            return image_part(source["url"], f"{where}.url")
        raise BadRequest(f"{where}: image sources must be base64 (with data) or url (with url)")
    except BadRequest as refused:
        raise _could_not(refused) from None


def _user(items: list[str | ImagePart]) -> Message:
    """A user turn; text blocks between images are joined as `_join` joins them."""
    if all(isinstance(item, str) for item in items):
        return Message(role="user", content=_join(items))
    parts: list[Part] = []
    for item in items:
        if isinstance(item, str) and parts and isinstance(parts[-1], TextPart):
            parts[-1] = TextPart(text=parts[-1].text + "\n\n" + item)
        else:
            parts.append(TextPart(text=item) if isinstance(item, str) else item)
    return message_with_parts("user", parts)


def _tool_result(block: wire.ToolResultBlock, name: str | None) -> Message:
    content = block.content
    if not isinstance(content, str):
        unreadable = [part for part in content if not isinstance(part, wire.TextBlock)]
        if unreadable:
            raise BadRequest(_unreadable(unreadable[0]) + " (in a tool_result)")
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


async def to_ask(
    data: wire.PromptRequest, server: ServerConfig, mcp: list[ToolSpec] = ()
) -> ChatAsk:
    """What the client asked, canonical (remote images fetched where allowed); sampling
    fields only where the request is a messages request. `mcp`: the model's `tools_from`
    tools, offered after the client's."""
    tools, controls = _controls(data, mcp)
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
    if reasoning is None and data.output_config and data.output_config.effort:
        reasoning = BUDGET_EFFORTS_OF.get(data.output_config.effort, data.output_config.effort)
    starts: list[int] = []
    messages = to_messages(data, starts)
    keep = keep_marks(data, starts)
    try:
        messages = await resolve_images(messages, server)
    except BadRequest as refused:
        raise _could_not(refused) from None
    return ChatAsk(
        messages=messages,
        tools=tools,
        reasoning=reasoning,
        controls=controls,
        keep=keep,
        **sampling,
    )


def _controls(
    data: wire.PromptRequest, mcp: list[ToolSpec] = ()
) -> tuple[list[ToolSpec], OutputControls]:
    """Tools offered and output controls: `tool_choice` (`none` offers no tools, `any` forces
    a call, `tool` names it, `disable_parallel_tool_use`), `strict` tools, and
    `output_config.format`."""
    choice = data.tool_choice or wire.ToolChoice(type="auto")
    # Server tools (web search, ...) run at Anthropic; there is nothing here to run them.
    tools = [
        ToolSpec(name=t.name, description=t.description, parameters=t.input_schema)
        for t in data.tools
        if t.type in (None, "custom")
    ]
    tools += mcp
    forced = None
    if choice.type == "none":
        tools = []
    elif choice.type == "tool":
        if not choice.name or choice.name not in {t.name for t in tools}:
            declared = ", ".join(sorted(t.name for t in tools)) or "none"
            raise BadRequest(
                f"tool_choice.name {choice.name!r} is not one of the tools (declared: {declared})"
            )
        forced = choice.name
    fmt = None
    if data.output_config and data.output_config.format:
        schema = data.output_config.format.schema
        fmt = OutputFormat(schema=schema, field="$.output_config.format.schema")
    names = {t.name for t in tools}
    disabled = choice.disable_parallel_tool_use  # None: not said, which is not `false`
    return tools, OutputControls(
        format=fmt,
        tool_choice="required" if choice.type in ("any", "tool") else "auto",
        forced_tool=forced,
        strict_tools=[t.name for t in data.tools if t.strict and t.name in names],
        parallel_tool_calls=None if disabled is None else not disabled,
    )


# Anthropic's thinking budget read as an effort: below 4k tokens is low, below 16k medium.
BUDGET_EFFORTS = ((4096, "low"), (16384, "medium"))
# `output_config.effort` as the gateway's effort (it has no level above high).
BUDGET_EFFORTS_OF = {"max": "high"}
# Fields Anthropic defines that this gateway cannot honour: a 400 naming each when set.
REFUSED = {
    "container": lambda v: True,
    "mcp_servers": bool,
    # Clearing earlier thinking is what always happens here (it is never replayed to the
    # model); clearing tool results server-side is not done, so that edit is refused.
    "context_management": lambda v: (
        not isinstance(v, dict)
        or any(
            not str(e.get("type", "")).startswith("clear_thinking") for e in v.get("edits") or []
        )
    ),
    "service_tier": lambda v: v not in ("auto", "standard_only"),
}


def effort(thinking: wire.ThinkingConfig | None) -> Effort | None:
    """`thinking` as the gateway's effort; None (absent) leaves the model's default."""
    if thinking is None:
        return None
    if thinking.type == "disabled":
        return "off"
    if thinking.type == "enabled" and thinking.budget_tokens:
        return next((e for cap, e in BUDGET_EFFORTS if thinking.budget_tokens < cap), "high")
    return "medium"  # enabled without a budget, adaptive, and kinds yet to come


@post("/v1/messages", status_code=200)
async def create_message(request: Request, generation: Generation) -> Response | Stream:
    """A Messages API answer; `stream: true` answers as Anthropic's server-sent events."""
    data = await decode_body(request, wire.MessagesRequest)
    refuse_set(data, REFUSED)
    route = resolve(generation, data.model)
    announce(route, stream=data.stream, protocol="anthropic")
    mcp = await offered_tools(request, route.model, {t.name for t in data.tools})
    # Its images may be fetched: a fetch stops with its client.
    ask = await unless_client_leaves(request, to_ask(data, generation.config.server, mcp.specs))
    ask = replace(ask, client=client_of(request))
    runner = route.runner
    chat, answers, reads = await serve_chat(runner, ask)
    (results,) = run_each(answers, runner, ask, mcp)  # run_tools: the gateway's loop
    tell_dropped_tools(request, chat)
    message_id = f"msg_{uuid.uuid4().hex[:24]}"
    if not data.stream:
        whole = await unless_client_leaves(request, collect(results))
        return Response(_message(message_id, route.served, whole, chat.stop))
    outputs = await started(request, results)
    try:
        first = await anext(outputs)  # already in: `started` waited for it
        # message_start tells the prompt's size before the engine's own count at the end:
        # as the engine read it and means to write it (`PromptRead`), else counted. Clients
        # keep message_start's input_tokens where message_delta's is 0 (Claude Code does).
        if isinstance(first, Finished):
            usage = usage_of(replace(first, new_tokens=0))
        elif (read := reads[0]) is not None:
            usage = wire.Usage(
                input_tokens=read.prompt_tokens - read.cached_tokens - read.writing_tokens,
                output_tokens=0,
                cache_creation_input_tokens=read.writing_tokens,
                cache_read_input_tokens=read.cached_tokens,
            )
        else:
            counted = await unless_client_leaves(request, count_chat(runner, chat))
            usage = wire.Usage(input_tokens=counted, output_tokens=0)
    except BaseException:
        await outputs.aclose()
        raise
    start = wire.Message(id=message_id, model=route.served, content=[], usage=usage)
    events = stream_events(start, first, outputs, chat.stop)
    return sse_response(request, events, error_event, outputs.aclose)


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
        usage=usage_of(finished),
    )


@post("/v1/messages/count_tokens", status_code=200)
async def count_tokens(request: Request, generation: Generation) -> wire.TokenCount:
    """Tokens in the prompt as the model will see it (template, system, tools included)."""
    data = await decode_body(request, wire.CountTokensRequest)
    route = resolve(generation, data.model)
    announce(route, stream=False, protocol="anthropic")
    mcp = await offered_tools(request, route.model, {t.name for t in data.tools})
    # Its images may be fetched: a fetch stops with its client.
    ask = await unless_client_leaves(request, to_ask(data, generation.config.server, mcp.specs))
    counted = await unless_client_leaves(request, count_chat(route.runner, ask))
    return wire.TokenCount(input_tokens=counted)


ROUTES = [create_message, count_tokens]
