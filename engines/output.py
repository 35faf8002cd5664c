"""From a model's raw text stream to canonical outputs: tool calls cut out, stops applied.

Both engines send their text through `OutputParser`, so a scripted reply and a real model's
output are parsed the same way. Tool calls are recognised by the markers of an mlx-lm tool
parser (`mlx_lm.tool_parsers.<name>`) and parsed by it; stop strings apply to the answer
text only, never inside a tool call.
"""

from __future__ import annotations

import importlib
import json
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from engines.stops import StopMatcher
from schemas.canonical import Output, TextDelta, ToolCall, ToolCallOutput

# The format used when neither the config nor the tokenizer names one: Hermes-style JSON
# between <tool_call> tags, which the fallback tool prompt (engines/tools.py) asks for.
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

    def __init__(self, stops: list[str], tool_format: ToolFormat | None, tools: list) -> None:
        self._stops = StopMatcher(stops)
        self._format = tool_format
        self._tools = tools
        self._text = ""  # answer text not yet passed on (could begin a tool-call marker)
        self._call: str | None = None  # inside a tool call: its text so far
        self.tool_calls = 0

    @property
    def stopped(self) -> bool:
        return self._stops.stopped

    def feed(self, text: str) -> list[Output]:
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
                    cut = len(self._text) - _partial_suffix(self._text, start)
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

    def finish(self) -> list[Output]:
        """Whatever was held back, once generation has ended."""
        outputs: list[Output] = []
        if self._call is not None and not self.stopped:
            # Some models end a call with end-of-sequence instead of the closing marker.
            body, self._call = self._call, None
            outputs += self._tool_call(body, raw=self._format.start + body)
        if self._text and not self.stopped:
            outputs += self._answer(self._text)
            self._text = ""
        tail = self._stops.flush()
        if tail:
            outputs.append(TextDelta(tail))
        return outputs

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
            return self._answer(raw)  # not a call after all: the client sees what was said
        outputs: list[Output] = []
        for call in calls:
            arguments = call.get("arguments", {})
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            self.tool_calls += 1
            call_id = f"call_{uuid.uuid4().hex[:24]}"
            outputs.append(
                ToolCallOutput(ToolCall(id=call_id, name=call["name"], arguments=arguments))
            )
        return outputs


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
