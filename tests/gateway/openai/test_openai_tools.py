"""OpenAI tool calls end to end on a scripted model whose reply is a tool call."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import serving

CONFIG = """
models:
  - id: caller
    engine: scripted
    script:
      reply: 'Checking. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("tools"), CONFIG) as process:
        yield process


def test_tool_call_comes_back_as_tool_calls(openai_client):
    reply = openai_client.chat.completions.create(model="caller", messages=ASK, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking. "
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_tool_call_streams_as_deltas(openai_client):
    chunks = list(
        openai_client.chat.completions.create(
            model="caller", messages=ASK, tools=TOOLS, stream=True
        )
    )
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(calls) == 1 and calls[0].index == 0 and calls[0].id.startswith("call_")
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_without_tools_the_reply_is_plain_text(openai_client):
    reply = openai_client.chat.completions.create(model="caller", messages=ASK)
    assert "<tool_call>" in reply.choices[0].message.content
    assert reply.choices[0].message.tool_calls is None


def test_a_follow_up_with_the_tool_result_is_accepted_and_counted(openai_client, gateway):
    first = openai_client.chat.completions.create(model="caller", messages=ASK, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    follow_up = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 21}'},
    ]
    second = openai_client.chat.completions.create(model="caller", messages=follow_up, tools=TOOLS)
    # The tool definitions and the tool turn are part of the rendered prompt, so they count.
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    plain = openai_client.chat.completions.create(model="caller", messages=ASK)
    assert first.usage.prompt_tokens > plain.usage.prompt_tokens


def test_malformed_tool_definitions_are_400(gateway):
    bad = [{"type": "function", "function": {"name": "has spaces"}}]
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "caller", "messages": ASK, "tools": bad},
    )
    assert response.status_code == 400
    assert "$.tools[0].function.name" in response.json()["error"]["message"]
