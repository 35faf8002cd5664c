"""From a model's raw text stream to canonical outputs: reasoning split off, tool calls cut
out, stops applied.

Both engines send their text through `OutputParser`, so a scripted reply and a real model's
output are parsed the same way. Reasoning (`<think>…</think>` or the tokenizer's markers) is
separated first and shown only when the request asked for reasoning. Tool calls are
recognised by the markers of an mlx-lm tool parser (`mlx_lm.tool_parsers.<name>`) and
parsed by it; under a checking `guardrails.tool_calls` policy a call that does not parse
comes out as a `MalformedToolCall` for the guardrails, otherwise as the text it was. Stop
strings apply to the answer text only, never inside reasoning or a tool call.
"""

from __future__ import annotations

import importlib
import json
import time
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from engines.text.reasoning import DEFAULT_THINK, ReasoningSplitter, ThinkMarkers, opens_thinking
from engines.text.stops import StopMatcher, partial_suffix
from engines.text.tools import tool_specs
from schemas.canonical import (
    ChatRequest,
    Finished,
    MalformedToolCall,
    Output,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallOutput,
)

# The format used when neither the config nor the tokenizer names one: Hermes-style JSON
# between <tool_call> tags, which the fallback tool prompt (engines/text/tools.py) asks for.
DEFAULT_TOOL_PARSER = "json_tools"


class ToolFormat(NamedTuple):
    start: str
    end: str
    parse: Callable[..., Any]


def load_tool_format(name: str) -> ToolFormat:
    """The markers and parse function of mlx-lm's tool parser `name`."""
    try:
        module = importlib.import_module(f"mlx_lm.tool_parsers.{name}")
    except ImportError:
        raise ValueError(f"unknown tool parser {name!r} (see mlx_lm.tool_parsers)") from None
    return ToolFormat(module.tool_call_start, module.tool_call_end, module.parse_tool_call)


class OutputParser:
    """Feed raw text; get back `TextDelta`s and `ToolCallOutput`s, with stops applied."""

    def __init__(
        self,
        stops: list[str],
        tool_format: ToolFormat | None,
        tools: list,
        *,
        reasoning: ReasoningSplitter | None = None,
        show_reasoning: bool = True,
        check_calls: bool = False,
        single_call: bool = False,
    ) -> None:
        self._stops = StopMatcher(stops)
        self._format = tool_format
        self._tools = tools
        self._reasoning = reasoning
        self._show_reasoning = show_reasoning
        self._check_calls = check_calls
        self._text = ""  # answer text not yet passed on (could begin a tool-call marker)
        self._call: str | None = None  # inside a tool call: its text so far
        self._single_call = single_call  # one call asked for: the first call ends it
        self.tool_calls = 0

    @classmethod
    def for_request(
        cls,
        request: ChatRequest,
        tool_format: ToolFormat | None,
        thinking: ThinkMarkers | None = DEFAULT_THINK,
        prompt_tail: str = "",
    ) -> OutputParser:
        """The parser for one request: its stops, tools, reasoning effort and tool policy.

        `thinking` is the model's think markers (None: it never thinks); `prompt_tail` is
        the end of the rendered prompt, which may already have opened a think block. A raw
        prompt (plain completions) is continued as is: nothing is split from it.
        """
        splitter = None
        if thinking is not None and request.raw_prompt is None:
            splitter = ReasoningSplitter(thinking, opens_thinking(prompt_tail, thinking))
        return cls(
            request.stop,
            tool_format if request.tools else None,
            tool_specs(request.tools),
            reasoning=splitter,
            show_reasoning=request.reasoning != "off",
            check_calls=request.tool_policy != "off",
            single_call=request.controls.one_call,
        )

    @property
    def stopped(self) -> bool:
        return self._stops.stopped or bool(self._single_call and self.tool_calls)

    def feed(self, text: str) -> list[Output]:
        """Outputs for the next piece of raw text."""
        if self._reasoning is None:
            return self._feed_answer(text)
        pieces = self._reasoning.feed(text)
        if len(pieces) == 1 and not pieces[0][0]:  # answer text alone: most tokens
            return self._feed_answer(pieces[0][1])
        return self._route(pieces)

    def _route(self, pieces: list[tuple[bool, str]]) -> list[Output]:
        outputs: list[Output] = []
        for thinking, piece in pieces:
            if self.stopped:
                break
            if not thinking:
                outputs += self._feed_answer(piece)
            elif self._show_reasoning:  # hidden when reasoning is off, as Ollama's think=false
                outputs.append(ReasoningDelta(piece))
        return outputs

    def _feed_answer(self, text: str) -> list[Output]:
        if self._format is None:
            return self._answer(text)
        outputs: list[Output] = []
        start, end = self._format.start, self._format.end
        if self._call is not None:
            self._call += text
        else:
            self._text += text
        while not self.stopped:
            if self._call is None:
                at = self._text.find(start)
                if at < 0:
                    cut = len(self._text) - partial_suffix(self._text, start)
                    outputs += self._answer(self._text[:cut])
                    self._text = self._text[cut:]
                    break
                outputs += self._answer(self._text[:at])
                self._call, self._text = self._text[at + len(start) :], ""
            else:
                at = self._call.find(end) if end else -1
                if at < 0:
                    break
                body, rest = self._call[:at], self._call[at + len(end) :]
                self._call = None
                outputs += self._tool_call(body, raw=start + body + end)
                self._text = rest
        return outputs

    def stop_reason(self, reason: str) -> str:
        """The reason to report: `tool_calls` when calls were cut out and the model then
        stopped by itself (end of sequence or a stop string), else `reason` as it is."""
        if self.tool_calls and reason in ("stop", "stop_string"):
            return "tool_calls"
        return reason

    def finish(self, reason: str = "stop") -> list[Output]:
        """Whatever was held back, once generation has ended for `reason`."""
        outputs: list[Output] = []
        if self._reasoning is not None:
            outputs += self._route(self._reasoning.finish())
        if self._call is not None and reason == "length" and self.tool_calls:
            # The token limit cut a call that followed complete ones: the answer is those
            # (finish `length`), not a broken call for the guardrails to re-ask about.
            self._call = None
        if self._call is not None and not self.stopped:
            # Some models end a call with end-of-sequence instead of the closing marker.
            body, self._call = self._call, None
            outputs += self._tool_call(body, raw=self._format.start + body)
        if self._text and not self.stopped:
            outputs += self._answer(self._text)
            self._text = ""
        tail = "" if self.stopped else self._stops.flush()
        if tail:
            outputs.append(TextDelta(tail))
        return outputs

    def end(self, reason: str, *, started: float, first_at: float | None, **counts) -> list[Output]:
        """What ends a sequence: whatever was held back, then `Finished` with the reason to
        report and the time split at the first token (`perf_counter` times; no first token:
        all prefill). `counts`: the rest of `Finished` (tokens, reuse, images)."""
        outputs = self.finish(reason)
        ended = time.perf_counter()
        first = first_at or ended
        return [
            *outputs,
            Finished(
                stop_reason=self.stop_reason(reason),
                prefill_s=first - started,
                decode_s=ended - first,
                **counts,
            ),
        ]

    def _answer(self, text: str) -> list[Output]:
        safe = self._stops.feed(text) if text else ""
        return [TextDelta(safe)] if safe else []

    def _tool_call(self, body: str, raw: str) -> list[Output]:
        try:
            parsed = self._format.parse(body, self._tools)
        except Exception:  # a parser's failure is the model's malformed call, not ours
            parsed = None
        calls = parsed if isinstance(parsed, list) else [parsed]
        if not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
            if self._check_calls:  # the markers were there: the guardrails judge it
                self.tool_calls += 1
                return [MalformedToolCall(body=body, raw=raw)]
            return self._answer(raw)  # not a call after all: the client sees what was said
        outputs: list[Output] = []
        for call in calls[:1] if self._single_call else calls:
            arguments = call.get("arguments", {})
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            self.tool_calls += 1
            call_id = f"call_{uuid.uuid4().hex[:24]}"
            outputs.append(
                ToolCallOutput(ToolCall(id=call_id, name=call["name"], arguments=arguments))
            )
        return outputs
