"""LiteLLM as a client of the gateway with its openai/, anthropic/ and ollama_chat/ prefixes:
plain, streamed, and a tool call, on scripted models."""

from __future__ import annotations

import json
import os

import pytest
from client_env import OFFLINE
from conftest import serving

CONFIG = """
models:
  - id: echo
    engine: scripted
    script: {reply: "hello from echo"}
  - id: caller
    engine: scripted
    script: {reply: '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'}
"""
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def litellm(gateway):
    os.environ.update(OFFLINE)  # before the import: LiteLLM reads its price list at import
    import litellm

    litellm.telemetry = False
    return litellm


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("litellm"), CONFIG) as process:
        yield process


def base(gateway, prefix: str) -> str:
    return f"{gateway.url}/v1" if prefix == "openai" else gateway.url


@pytest.mark.parametrize("prefix", ["openai", "anthropic", "ollama_chat"])
def test_plain_and_streamed(gateway, litellm, prefix):
    options = dict(model=f"{prefix}/echo", api_base=base(gateway, prefix), api_key="unused")
    reply = litellm.completion(messages=HELLO, **options)
    assert reply.choices[0].message.content == "hello from echo"
    assert reply.usage.prompt_tokens > 0
    chunks = litellm.completion(messages=HELLO, stream=True, **options)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "hello from echo"


@pytest.mark.parametrize("prefix", ["openai", "anthropic", "ollama_chat"])
def test_a_tool_call(gateway, litellm, prefix):
    reply = litellm.completion(
        model=f"{prefix}/caller",
        api_base=base(gateway, prefix),
        api_key="unused",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=TOOLS,
    )
    [call] = reply.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


# LiteLLM's `ollama/` provider builds a pydantic adapter for a ReadOnly TypedDict of its
# own, which pydantic warns about once per process: the client's warning, not the gateway's.
@pytest.mark.filterwarnings("ignore:.*on TypedDict class.*ReadOnly:UserWarning")
@pytest.mark.parametrize("prefix", ["ollama_chat", "ollama", "openai", "anthropic"])
async def test_async_completion(gateway, litellm, prefix):
    """`acompletion`: LiteLLM's async Ollama path sends `content-type:
    application/octet-stream` (its sync path sends none); Ollama ignores the type."""
    options = dict(model=f"{prefix}/echo", api_base=base(gateway, prefix), api_key="unused")
    reply = await litellm.acompletion(messages=HELLO, **options)
    assert reply.choices[0].message.content == "hello from echo"
    chunks = await litellm.acompletion(messages=HELLO, stream=True, **options)
    assert "".join([c.choices[0].delta.content or "" async for c in chunks]) == "hello from echo"
