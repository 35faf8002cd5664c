"""The canonical output stream as Responses API events, building the final response as it goes.

A plain answer runs the same builder and keeps only `response`, so a streamed answer and a
plain one always have the same output items.
"""

from __future__ import annotations

import uuid

from msgspec.structs import replace

from gateway.openai.controls import wire_logprobs
from schemas import openai_responses as wire
from schemas.canonical import (
    Finished,
    Logprobs,
    Output,
    ReasoningDelta,
    TextDelta,
    ToolCallOutput,
)


class EventBuilder:
    """Feeds on canonical outputs; returns each one's events, numbered in order."""

    def __init__(self, skeleton: wire.Response, summary: bool = False) -> None:
        self.response = skeleton
        # The request asked for a reasoning summary: the thinking goes there (the AI SDK
        # reads nothing else), with the summary events instead of the reasoning_text ones.
        self._summary = summary
        self._sequence = 0
        self._open: wire.OutputMessage | None = None  # the message whose text is streaming
        self._text: list[str] = []
        self._thinking: wire.OutputReasoning | None = None  # the reasoning item streaming
        self._thoughts: list[str] = []
        self._pending: list = []  # logprobs of tokens whose text has not come out yet
        self._logprobs: list = []  # of the open message's text

    def start(self) -> list[wire.Event]:
        """`response.created` and `response.in_progress`."""
        return [
            self._event(wire.ResponseCreated, response=self._snapshot()),
            self._event(wire.ResponseInProgress, response=self._snapshot()),
        ]

    def feed(self, output: Output) -> list[wire.Event]:
        """The events one canonical output makes; `Finished` completes the response."""
        if isinstance(output, Logprobs):
            self._pending += wire_logprobs(output.tokens)
            return []
        if isinstance(output, ReasoningDelta):
            self._pending = []  # the reasoning's tokens: not the answer text's
            return self._reasoning_delta(output.text)
        events = self._close_reasoning()  # thinking ends where anything else begins
        if isinstance(output, TextDelta):
            return events + (self._text_delta(output.text) if output.text else [])
        if isinstance(output, ToolCallOutput):
            return [*events, *self._close_message("completed"), *self._function_call(output)]
        if isinstance(output, Finished):
            return events + self._finish(output)
        return events

    def open_item(self, item: wire.OutputItem, *middle: tuple[type, dict]) -> list[wire.Event]:
        """An item made outside the builder (the MCP loop's): what is open closes, then
        `output_item.added` and the item's own events (`middle`, each with its place)."""
        events = [*self._close_reasoning(), *self._close_message("completed")]
        index = len(self.response.output)
        events.append(self._event(wire.OutputItemAdded, output_index=index, item=item))
        return events + self._item_events(item, index, middle)

    def close_item(self, item: wire.OutputItem, *middle: tuple[type, dict]) -> list[wire.Event]:
        """The item `open_item` began, as it ended: its last events, `output_item.done`."""
        index = len(self.response.output)
        self.response.output.append(item)
        events = self._item_events(item, index, middle)
        return [*events, self._event(wire.OutputItemDone, output_index=index, item=item)]

    def _item_events(self, item, index: int, middle) -> list[wire.Event]:
        return [self._event(k, item_id=item.id, output_index=index, **f) for k, f in middle]

    def error(self, code: str, message: str) -> wire.Event:
        """The `error` event for a failure after the stream began."""
        return self._event(wire.ErrorEvent, code=code, message=message)

    def _reasoning_delta(self, text: str) -> list[wire.Event]:
        events = self._close_message("completed")
        index = len(self.response.output)
        if self._thinking is None:
            self._thinking = wire.OutputReasoning(
                id=f"rs_{uuid.uuid4().hex}", status="in_progress", content=[]
            )
            self._thoughts = []
            where = dict(item_id=self._thinking.id, output_index=index)
            events += [
                self._event(wire.OutputItemAdded, output_index=index, item=self._thinking),
                self._event(
                    wire.ReasoningSummaryPartAdded,
                    summary_index=0,
                    part=wire.SummaryText(text=""),
                    **where,
                )
                if self._summary
                else self._event(
                    wire.ContentPartAdded,
                    content_index=0,
                    part=wire.ReasoningText(text=""),
                    **where,
                ),
            ]
        self._thoughts.append(text)
        where = dict(item_id=self._thinking.id, output_index=index, delta=text)
        if self._summary:
            return [*events, self._event(wire.ReasoningSummaryTextDelta, summary_index=0, **where)]
        return [*events, self._event(wire.ReasoningTextDelta, content_index=0, **where)]

    def _close_reasoning(self) -> list[wire.Event]:
        if self._thinking is None:
            return []
        text = "".join(self._thoughts)
        index = len(self.response.output)
        self._thinking, thinking = None, self._thinking
        if self._summary:
            summary = wire.SummaryText(text=text)
            item = replace(thinking, status="completed", summary=[summary])
            where = dict(item_id=item.id, output_index=index, summary_index=0)
            events = [
                self._event(wire.ReasoningSummaryTextDone, text=text, **where),
                self._event(wire.ReasoningSummaryPartDone, part=summary, **where),
            ]
        else:
            part = wire.ReasoningText(text=text)
            item = replace(thinking, status="completed", content=[part])
            where = dict(item_id=item.id, output_index=index, content_index=0)
            events = [
                self._event(wire.ReasoningTextDone, text=text, **where),
                self._event(wire.ContentPartDone, part=part, **where),
            ]
        self.response.output.append(item)
        return [*events, self._event(wire.OutputItemDone, output_index=index, item=item)]

    def _event(self, kind: type[wire.Event], **fields) -> wire.Event:
        event = kind(sequence_number=self._sequence, **fields)
        self._sequence += 1
        return event

    def _snapshot(self) -> wire.Response:
        return replace(self.response, output=list(self.response.output))

    def _text_delta(self, text: str) -> list[wire.Event]:
        events = [] if self._open else self._open_message()
        self._text.append(text)
        index = len(self.response.output)
        logprobs, self._pending = self._pending, []
        self._logprobs += logprobs
        events.append(
            self._event(
                wire.OutputTextDelta,
                item_id=self._open.id,
                output_index=index,
                content_index=0,
                delta=text,
                logprobs=logprobs,
            )
        )
        return events

    def _open_message(self) -> list[wire.Event]:
        self._open = wire.OutputMessage(
            id=f"msg_{uuid.uuid4().hex}", status="in_progress", content=[]
        )
        self._text = []
        self._logprobs = []
        index = len(self.response.output)
        return [
            self._event(wire.OutputItemAdded, output_index=index, item=self._open),
            self._event(
                wire.ContentPartAdded,
                item_id=self._open.id,
                output_index=index,
                content_index=0,
                part=wire.OutputText(text=""),
            ),
        ]

    def _close_message(self, status: wire.ItemStatus) -> list[wire.Event]:
        if self._open is None:
            return []
        text = "".join(self._text)
        part = wire.OutputText(text=text, logprobs=self._logprobs)
        item = replace(self._open, status=status, content=[part])
        index = len(self.response.output)
        events = [
            self._event(
                wire.OutputTextDone,
                item_id=item.id,
                output_index=index,
                content_index=0,
                text=text,
                logprobs=self._logprobs,
            ),
            self._event(
                wire.ContentPartDone,
                item_id=item.id,
                output_index=index,
                content_index=0,
                part=part,
            ),
            self._event(wire.OutputItemDone, output_index=index, item=item),
        ]
        self.response.output.append(item)
        self._open = None
        return events

    def _function_call(self, output: ToolCallOutput) -> list[wire.Event]:
        call = output.call
        item = wire.OutputFunctionCall(
            id=f"fc_{uuid.uuid4().hex}",
            call_id=call.id,
            name=call.name,
            arguments="",
            status="in_progress",
        )
        done = replace(item, arguments=call.arguments, status="completed")
        index = len(self.response.output)
        self.response.output.append(done)
        # The parser hands over a whole call, so its arguments go out as one delta.
        return [
            self._event(wire.OutputItemAdded, output_index=index, item=item),
            self._event(
                wire.FunctionCallArgumentsDelta,
                item_id=item.id,
                output_index=index,
                delta=call.arguments,
            ),
            self._event(
                wire.FunctionCallArgumentsDone,
                item_id=item.id,
                output_index=index,
                name=call.name,
                arguments=call.arguments,
            ),
            self._event(wire.OutputItemDone, output_index=index, item=done),
        ]

    def _finish(self, finished: Finished) -> list[wire.Event]:
        cut = finished.stop_reason == "length"
        events = []
        if not self.response.output and self._open is None:
            events += self._open_message()  # no output at all: still one (empty) message
        events += self._close_message("incomplete" if cut else "completed")
        self.response = replace(
            self.response,
            status="incomplete" if cut else "completed",
            incomplete_details=wire.IncompleteDetails(reason="max_output_tokens") if cut else None,
            usage=wire.ResponseUsage(
                input_tokens=finished.prompt_tokens,
                input_tokens_details=wire.InputTokensDetails(
                    cached_tokens=finished.reused_prefix_tokens,
                    cache_write_tokens=finished.cache_written_tokens,
                ),
                output_tokens=finished.new_tokens,
                total_tokens=finished.prompt_tokens + finished.new_tokens,
            ),
        )
        # OpenAI ends a response cut at max_output_tokens with `response.incomplete`.
        final = wire.ResponseIncomplete if cut else wire.ResponseCompleted
        return [*events, self._event(final, response=self._snapshot())]
