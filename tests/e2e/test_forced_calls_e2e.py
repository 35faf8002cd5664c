"""Forced tool calls on the real SmolLM2 through the official clients, as issue 25 sent them:
no `parallel_tool_calls`, a schema without `additionalProperties`, a small budget. Each is
one schema-valid call that ends the answer, in seconds (it was a 502 after ~44 s: the model
called again and again until the budget cut a call, which the guardrails then re-asked)."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest

WEATHER = {  # as clients send it: extra keys not forbidden
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
RAIN = [{"role": "user", "content": "What is the weather in Paris?"}]
# Generous for a 135M model on two shared cores: a single call takes about 1-3 s.
FAST_S = 10.0


@pytest.mark.parametrize(
    "choice",
    [{"type": "function", "function": {"name": "get_weather"}}, "required"],
    ids=["named", "required"],
)
def test_a_forced_call_through_the_openai_client_is_one_call(shipped_gateway, choice):
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
    started = time.monotonic()
    reply = shipped_gateway.openai().chat.completions.create(
        model="smollm2", messages=RAIN, tools=[tool], tool_choice=choice, max_tokens=48
    )
    elapsed = time.monotonic() - started
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    assert reply.choices[0].finish_reason == "tool_calls"
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"


@pytest.mark.parametrize(
    "choice",
    [{"type": "tool", "name": "get_weather"}, {"type": "any"}],
    ids=["tool", "any"],
)
def test_a_forced_call_through_the_anthropic_client_is_one_call(shipped_gateway, choice):
    started = time.monotonic()
    reply = shipped_gateway.anthropic().messages.create(
        model="smollm2",
        max_tokens=48,
        messages=RAIN,
        tools=[{"name": "get_weather", "input_schema": WEATHER}],
        tool_choice=choice,
    )
    elapsed = time.monotonic() - started
    (block,) = [b for b in reply.content if b.type == "tool_use"]
    assert block.name == "get_weather"
    jsonschema.validate(block.input, WEATHER)
    assert reply.stop_reason == "tool_use"
    assert elapsed < FAST_S, f"took {elapsed:.1f} s"
