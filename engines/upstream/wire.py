"""The OpenAI protocol as a replica speaks it: a canonical request becomes a streaming body;
the replica's server-sent chunks become canonical outputs, with its usage as the count."""

from __future__ import annotations

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
    if request.stop:
        body["stop"] = request.stop
    if request.reasoning != "off":
        body["reasoning_effort"] = request.reasoning
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return path, body


class StreamDecoder:
    """One replica's chunks, in order, as canonical outputs (tool calls whole, once done)."""

    def __init__(self, show_reasoning: bool) -> None:
        self._show_reasoning = show_reasoning
        self._calls: dict[int, dict[str, str]] = {}  # index -> id, name, arguments so far
        self.stop_reason: str | None = None
        self.prompt_tokens = 0
        self.new_tokens = 0
        self.cached_tokens = 0
        self.tool_calls = 0

    def feed(self, chunk: Any) -> list[Output]:
        """Outputs for one decoded `data:` object; an error object raises `UpstreamError`."""
        if not isinstance(chunk, dict):
            raise UpstreamError(f"the upstream sent a chunk that is not an object: {chunk!r:.200}")
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message", error) if isinstance(error, dict) else error
            raise UpstreamError(f"the upstream failed mid-stream: {message}")
        if isinstance(usage := chunk.get("usage"), dict):
            self.prompt_tokens = int(usage.get("prompt_tokens") or 0)
            self.new_tokens = int(usage.get("completion_tokens") or 0)
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                self.cached_tokens = int(details.get("cached_tokens") or 0)
        outputs: list[Output] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta")
            if delta is None:  # /completions: the text is on the choice itself
                text = choice.get("text")
                if text:
                    outputs.append(TextDelta(text))
            else:
                outputs += self._delta(delta)
            if choice.get("finish_reason"):
                self.stop_reason = choice["finish_reason"]
                outputs += self._calls_done()
        return outputs

    def _delta(self, delta: dict) -> list[Output]:
        outputs: list[Output] = []
        # vLLM and DeepSeek say `reasoning_content`; mlx-lm's server, Ollama and others `reasoning`.
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if thought and self._show_reasoning:
            outputs.append(ReasoningDelta(thought))
        if content := delta.get("content"):
            outputs.append(TextDelta(content))
        for part in delta.get("tool_calls") or []:
            index = part.get("index", len(self._calls))
            call = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            function = part.get("function") or {}
            call["id"] = part.get("id") or call["id"]
            call["name"] += function.get("name") or ""
            call["arguments"] += function.get("arguments") or ""
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
        if reason == "stop" and self.tool_calls:  # some servers say "stop" after a call
            reason = "tool_calls"
        return Finished(
            stop_reason=reason,
            prompt_tokens=self.prompt_tokens,
            new_tokens=self.new_tokens,
            prefill_s=prefill_s,
            decode_s=decode_s,
            reused_prefix_tokens=self.cached_tokens,
            replica=replica,
        )
