"""The OpenAI protocol as a replica speaks it: a canonical request becomes a streaming body;
the replica's server-sent chunks become canonical outputs, with its usage as the count."""

from __future__ import annotations

import re
from typing import Any

from engines.errors import UpstreamError
from schemas.canonical import (
    ChatRequest,
    Finished,
    Message,
    Output,
    ReasoningDelta,
    StopReason,
    TextDelta,
    ToolCall,
    ToolCallOutput,
)

STOP_REASONS: dict[str, StopReason] = {
    "stop": "stop",
    "eos": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
}


def _message(message: Message) -> dict[str, Any]:
    # `developer` is OpenAI's newer name for a system turn; most servers know only `system`.
    out: dict[str, Any] = {
        "role": "system" if message.role == "developer" else message.role,
        "content": message.content,
    }
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None and message.role == "tool":
        out["name"] = message.name
    return out


def request_body(
    request: ChatRequest, model: str | None, *, stream: bool = True
) -> tuple[str, dict]:
    """The path under the replica's base URL and the JSON body that asks it for `request`.

    Every field of the canonical request is sent (the replica honours or refuses it, as the
    gateway would): sampling, seed, stops, tools, the reasoning effort. A raw prompt (plain
    completions) goes to `/completions`, a conversation to `/chat/completions`.
    """
    body: dict[str, Any] = {}
    if request.raw_prompt is not None:
        path, body["prompt"] = "/completions", request.raw_prompt
    else:
        path, body["messages"] = "/chat/completions", [_message(m) for m in request.messages]
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters or {"type": "object", "properties": {}},
                },
            }
            for t in request.tools
        ]
    if model is not None:
        body["model"] = model
    sampling = request.sampling
    body.update(max_tokens=request.max_tokens, temperature=sampling.temperature)
    body["top_p"] = sampling.top_p
    # Not OpenAI's own fields, but vLLM, SGLang, llama.cpp and mlx-lm's server read them;
    # sent only when set, so a strict server sees nothing it does not know.
    if sampling.top_k:
        body["top_k"] = sampling.top_k
    if sampling.min_p:
        body["min_p"] = sampling.min_p
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    # OpenAI's own penalty fields, and vLLM's and mlx-lm's `repetition_penalty`; the
    # replica counts them over its own look-back (`repeat_last_n` is not sent).
    if sampling.presence_penalty:
        body["presence_penalty"] = sampling.presence_penalty
    if sampling.frequency_penalty:
        body["frequency_penalty"] = sampling.frequency_penalty
    if sampling.repeat_penalty != 1.0:
        body["repetition_penalty"] = sampling.repeat_penalty
    if sampling.logit_bias:
        body["logit_bias"] = {str(t): b for t, b in sampling.logit_bias.items()}
    if request.stop:
        body["stop"] = request.stop
    if request.reasoning != "off":
        body["reasoning_effort"] = request.reasoning
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return path, body


# What one token is taken to be, at most, when counting a replica's output against
# `max_tokens`: a piece counts one token per this many characters (at least one), so a
# replica streaming a token a chunk is counted exactly and one sending a megabyte in a
# chunk is not counted as one token.
CHARS_PER_TOKEN = 16


# How much of a replica's own error text a client and the log are told.
MAX_QUOTED = 300
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def quoted(text: Any) -> str:
    """A replica's error text as the gateway repeats it: one line, no control characters,
    at most `MAX_QUOTED` characters (secrets are taken out by the log's redactor)."""
    text = _CONTROL.sub(" ", str(text)).strip()
    return text if len(text) <= MAX_QUOTED else text[:MAX_QUOTED] + "…"


def _text(value: Any, field: str) -> str:
    """A text field of a chunk: a string, or nothing; anything else is the replica's fault."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UpstreamError(
            f"the upstream sent a malformed chunk: `{field}` is {type(value).__name__}"
        )
    return value


def _object(value: Any, field: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UpstreamError(
            f"the upstream sent a malformed chunk: `{field}` is {type(value).__name__}"
        )
    return value


def _list(value: Any, field: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise UpstreamError(
            f"the upstream sent a malformed chunk: `{field}` is {type(value).__name__}"
        )
    return value


class StreamDecoder:
    """One replica's chunks, in order, as canonical outputs (tool calls whole, once done).

    `max_tokens` is held here whatever the replica does: its pieces (text, reasoning shown
    or not, tool-call fragments) are counted (see `CHARS_PER_TOKEN`), and once they reach
    the cap the decoder is `capped`: the rest is not read and the answer ends as `length`.
    `progress` counts the pieces that carried something, keep-alives and empty chunks not.
    """

    def __init__(self, show_reasoning: bool, max_tokens: int | None = None) -> None:
        self._show_reasoning = show_reasoning
        self._max_tokens = max_tokens
        self._calls: dict[int, dict[str, str]] = {}  # index -> id, name, arguments so far
        self.stop_reason: str | None = None
        self.prompt_tokens = 0
        self.new_tokens = 0
        self.cached_tokens = 0
        self.tool_calls = 0
        self.counted = 0  # tokens counted here, against `max_tokens`
        self.progress = 0
        self.capped = False

    def feed(self, chunk: Any) -> list[Output]:
        """Outputs for one decoded `data:` object; an error object or a malformed chunk
        raises `UpstreamError`."""
        if not isinstance(chunk, dict):
            raise UpstreamError(f"the upstream sent a chunk that is not an object: {chunk!r:.200}")
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise UpstreamError(f"the upstream failed mid-stream: {quoted(message)}")
        if isinstance(usage := chunk.get("usage"), dict):
            try:
                self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                self.new_tokens = int(usage.get("completion_tokens") or 0)
                details = usage.get("prompt_tokens_details")
                if isinstance(details, dict):
                    self.cached_tokens = int(details.get("cached_tokens") or 0)
            except (TypeError, ValueError):
                raise UpstreamError("the upstream sent a malformed chunk: `usage`") from None
        if self.capped:  # only the usage is read past the cap
            return []
        outputs: list[Output] = []
        for choice in _list(chunk.get("choices"), "choices"):
            choice = _object(choice, "choices[]")
            if "delta" not in choice:  # /completions: the text is on the choice itself
                if text := self._take(_text(choice.get("text"), "text")):
                    outputs.append(TextDelta(text))
            else:
                outputs += self._delta(_object(choice["delta"], "delta"))
            if self.capped:
                self.stop_reason = "length"
                self._calls.clear()  # a call cut off is no call
                return outputs
            if reason := choice.get("finish_reason"):
                self.stop_reason = _text(reason, "finish_reason")
                outputs += self._calls_done()
        return outputs

    def _take(self, text: str) -> str:
        """`text` as far as the cap lets it through; counts it."""
        if not text or self.capped:
            return ""
        self.progress += 1
        tokens = -(-len(text) // CHARS_PER_TOKEN)
        if self._max_tokens is not None and self.counted + tokens >= self._max_tokens:
            text = text[: (self._max_tokens - self.counted) * CHARS_PER_TOKEN]
            tokens, self.capped = self._max_tokens - self.counted, True
        self.counted += tokens
        return text

    def _delta(self, delta: dict) -> list[Output]:
        outputs: list[Output] = []
        # vLLM and DeepSeek say `reasoning_content`; mlx-lm's server, Ollama and others `reasoning`.
        thought = _text(delta.get("reasoning_content"), "reasoning_content") or _text(
            delta.get("reasoning"), "reasoning"
        )
        if (thought := self._take(thought)) and self._show_reasoning:
            outputs.append(ReasoningDelta(thought))
        if content := self._take(_text(delta.get("content"), "content")):
            outputs.append(TextDelta(content))
        for part in _list(delta.get("tool_calls"), "tool_calls"):
            part = _object(part, "tool_calls[]")
            index = part.get("index", len(self._calls))
            if not isinstance(index, int):
                raise UpstreamError("the upstream sent a malformed chunk: `index`")
            call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            function = _object(part.get("function"), "function")
            call["id"] = _text(part.get("id"), "id") or call["id"]
            name = _text(function.get("name"), "name")
            arguments = _text(function.get("arguments"), "arguments")
            if self._take(name + arguments) != name + arguments:
                break  # the cap fell inside this call
            call["name"] += name
            call["arguments"] += arguments
        return outputs

    def _calls_done(self) -> list[Output]:
        calls = [
            ToolCallOutput(
                ToolCall(
                    id=c["id"] or f"call_{index}",
                    name=c["name"],
                    arguments=c["arguments"] or "{}",
                )
            )
            for index, c in sorted(self._calls.items())
        ]
        self._calls.clear()
        self.tool_calls += len(calls)
        return calls

    def finished(self, prefill_s: float, decode_s: float, replica: str) -> Finished:
        """The replica's own accounting of the answer, once it has said why it stopped."""
        reason = STOP_REASONS.get(self.stop_reason or "", "stop")
        new_tokens = self.new_tokens
        if self.capped:  # cut here: the replica's own count never came, or counts more
            reason, new_tokens = "length", self.counted
        if reason == "stop" and self.tool_calls:  # some servers say "stop" after a call
            reason = "tool_calls"
        return Finished(
            stop_reason=reason,
            prompt_tokens=self.prompt_tokens,
            new_tokens=new_tokens,
            prefill_s=prefill_s,
            decode_s=decode_s,
            reused_prefix_tokens=self.cached_tokens,
            replica=replica,
        )
