"""The Vercel AI SDK (its openai-compatible, anthropic and openai providers) against a gateway
on scripted models: generateText, streamText, a tool loop, a two-turn Responses conversation
with store on, reasoning on Responses. The scenarios are tests/clients/js/ai_sdk.mjs."""

from __future__ import annotations

import httpx
import pytest
from client_env import node
from conftest import serving

CONFIG = """
models:
  - id: echo
    engine: scripted
    script: {reply: "hello from echo"}
  - id: weather-compatible
    engine: scripted
    script: &weather
      replies:
        - '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        - "It is sunny in Paris."
  - id: weather-anthropic
    engine: scripted
    script: *weather
  - id: weather-responses
    engine: scripted
    script: *weather
  - id: thinker
    engine: scripted
    reasoning: medium  # thinking is shown (a model at `off` hides it)
    script:
      replies:
        - "<think>France's capital is Paris.</think>Paris."
        - "<think>France's capital is Paris.</think>Paris."
        - "<think>France's capital is Paris.</think>Paris."
        - "<think>Germany's capital is Berlin.</think>Berlin."
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("ai-sdk"), CONFIG) as process:
        yield process


def test_generate_and_stream_text_on_chat_completions(gateway):
    result = node("ai_sdk.mjs", "chat", gateway.url, "echo")
    assert result["text"] == result["streamed"] == "hello from echo"
    assert result["usage"]["inputTokens"] > 0 and result["usage"]["outputTokens"] > 0


@pytest.mark.parametrize("model", ["echo", "claude-echo"])
def test_generate_and_stream_text_on_anthropic_messages(gateway, model):
    result = node("ai_sdk.mjs", "anthropic", gateway.url, model)
    assert result["text"] == result["streamed"] == "hello from echo"


@pytest.mark.parametrize("provider", ["compatible", "anthropic", "responses"])
def test_a_tool_loop_runs_the_tool_and_answers(gateway, provider):
    result = node("ai_sdk.mjs", "tools", gateway.url, f"weather-{provider}", provider)
    assert result["calls"] == [["get_weather", {"city": "Paris"}]]
    assert result["results"] == [{"city": "Paris", "sky": "sunny"}]
    assert result["steps"] == 2 and result["text"] == "It is sunny in Paris."


def test_a_two_turn_responses_conversation_with_store_on(gateway):
    result = node("ai_sdk.mjs", "responses", gateway.url, "echo")
    assert [who for who, _ in result["transcript"]] == ["user", "assistant"] * 3
    first, second, third = result["ids"]
    assert result["inputTokens"][0] < result["inputTokens"][1] < result["inputTokens"][2]
    # The second turn sent the first answer back by reference: its input holds that item.
    headers = {"authorization": "Bearer unused"}
    answer = httpx.get(f"{gateway.url}/v1/responses/{first}", headers=headers).json()["output"]
    items = httpx.get(f"{gateway.url}/v1/responses/{second}/input_items", headers=headers).json()
    assert answer[0]["id"] in [item["id"] for item in items["data"]]
    continued = httpx.get(f"{gateway.url}/v1/responses/{third}", headers=headers).json()
    assert continued["previous_response_id"] == second


@pytest.mark.e2e
def test_the_responses_conversation_on_the_real_model(shipped_gateway):
    result = node("ai_sdk.mjs", "responses", shipped_gateway.url, "smollm2")
    answers = [text for who, text in result["transcript"] if who == "assistant"]
    assert "Paris" in answers[0] and "Berlin" in answers[1] and "Rome" in answers[2]


def test_responses_reasoning_reaches_reasoning_text_when_a_summary_is_asked(gateway):
    """The gateway answers as OpenAI and vLLM do: the thinking is the reasoning item's
    `content` (`reasoning_text`), and also its `summary` when `reasoning.summary` is set.
    The AI SDK reads only `summary`, so its `reasoningText` needs `reasoningSummary`
    (and `forceReasoning`, for a model id it does not know as a reasoning model)."""
    result = node("ai_sdk.mjs", "reasoning", gateway.url, "thinker")
    thought = "France's capital is Paris."
    assert result["summarised"] == {"text": "Paris.", "reasoningText": thought}
    assert result["streamed"] == {"text": "Paris.", "reasoningText": thought}
    # Unasked, the SDK drops the item's content: the answer is still whole.
    assert result["plain"] == {"text": "Paris.", "reasoningText": ""}
    # The first turn's reasoning went back in the second request, which answers.
    assert result["sentBack"][0] == "reasoning"
    assert result["second"] == {"text": "Berlin.", "reasoningText": "Germany's capital is Berlin."}


def test_responses_reasoning_without_a_summary_is_the_items_content(gateway):
    """What the AI SDK leaves unread is there, in OpenAI's shape (openai SDK types)."""
    from openai import OpenAI

    client = OpenAI(base_url=f"{gateway.url}/v1", api_key="unused")
    response = client.responses.create(model="thinker", input="Capital of France?", store=False)
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.summary == []
    assert [(part.type, part.text) for part in reasoning.content] == [
        ("reasoning_text", "France's capital is Paris.")
    ]
    assert message.content[0].text == "Paris."
