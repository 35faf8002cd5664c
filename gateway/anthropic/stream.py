"""Anthropic Messages answers in Anthropic's shapes: stop reasons, tool inputs, and the
stream's event sequence (message_start, content_block_*, ping, message_delta, message_stop),
built by `Framer` from the canonical output stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import msgspec
from litestar.response.sse import ServerSentEventMessage

from gateway.anthropic.errors import envelope
from schemas import anthropic as wire
from schemas.canonical import Finished, Output, ReasoningDelta, TextDelta

STOP_REASONS = {
    "stop": "end_turn",
    "cancelled": "end_turn",
    "length": "max_tokens",
    "stop_string": "stop_sequence",
    "tool_calls": "tool_use",
}


# Thinking blocks carry a signature for Anthropic to verify when they are sent back; nothing
# here verifies them (earlier thinking is not replayed), so it is empty.
NO_SIGNATURE = ""


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


def usage_of(finished: Finished, usage: type[wire.Usage | wire.MessageDeltaUsage] = wire.Usage):
    """The engine's accounting as Anthropic's usage: the prompt split into what came from a
    cache tier, what this request wrote to one, and the rest."""
    read, written = finished.reused_prefix_tokens, finished.cache_written_tokens
    return usage(
        input_tokens=max(0, finished.prompt_tokens - read - written),
        output_tokens=finished.new_tokens,
        cache_creation_input_tokens=written,
        cache_read_input_tokens=read,
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
                    usage=usage_of(output, wire.MessageDeltaUsage),
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


async def stream_events(
    start: wire.Message, first: Output, rest: AsyncIterator[Output], stops: list[str]
) -> AsyncIterator[ServerSentEventMessage]:
    """The answer as Anthropic's event sequence, message_start to message_stop."""
    framer = Framer(stops)
    yield sse(wire.MessageStart(message=start))
    for event in framer.feed(first):
        yield sse(event)
    async for output in rest:
        for event in framer.feed(output):
            yield sse(event)


def error_event(status: int, message: str, kind: str) -> ServerSentEventMessage:
    """A failure after the 200 went out, as Anthropic reports it: an `error` event."""
    body = envelope(status, message, kind)
    return ServerSentEventMessage(event="error", data=msgspec.json.encode(body).decode())
