"""Output controls in every protocol, on scripted models: a scripted reply is checked
against the request's constraint (the grammar a real model is masked with), so a reply that
satisfies it passes and one that does not gives way to the grammar's short instance — proof
the control reached the engine. Logprobs and `n` come back in each protocol's shape."""

from __future__ import annotations

import json

import httpx
import pydantic
import pytest
from conftest import serving

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
CONFIG = f"""
models:
  - id: json
    engine: scripted
    script: {{reply: '{{"name": "Ada", "age": 36}}'}}
  - id: thinker
    engine: scripted
    script: {{reply: '<think>Free thoughts, not JSON.</think>{{"name": "Ada", "age": 36}}'}}
  - id: prose
    engine: scripted
    script: {{reply: "It is sunny in Paris."}}
  - id: caller
    engine: scripted
    script: {{reply: '{CALL}'}}
  - id: twice
    engine: scripted
    script: {{reply: '{CALL}\\n{CALL}'}}
"""
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
OPENAI_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "parameters": PARAMS}
ANTHROPIC_TOOL = {"name": "get_weather", "input_schema": PARAMS}
HI = [{"role": "user", "content": "Weather in Paris, as JSON?"}]


class Person(pydantic.BaseModel):
    name: str
    age: int


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("controls"), CONFIG) as process:
        yield process


def post(gateway, path: str, body: dict) -> httpx.Response:
    return httpx.post(gateway.url + path, json=body, timeout=30)


# One JSON format request per protocol: (path, body, the answer's text from the reply).
FORMATS = {
    "openai": (
        "/v1/chat/completions",
        {
            "messages": HI,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "person", "schema": PERSON, "strict": True},
            },
        },
        lambda r: r["choices"][0]["message"]["content"],
    ),
    "openai json_object": (
        "/v1/chat/completions",
        {"messages": HI, "response_format": {"type": "json_object"}},
        lambda r: r["choices"][0]["message"]["content"],
    ),
    "responses": (
        "/v1/responses",
        {"input": "hi", "text": {"format": {"type": "json_schema", "name": "p", "schema": PERSON}}},
        lambda r: r["output"][-1]["content"][0]["text"],
    ),
    "anthropic": (
        "/v1/messages",
        {
            "messages": HI,
            "max_tokens": 200,
            "output_config": {"format": {"type": "json_schema", "schema": PERSON}},
        },
        lambda r: r["content"][-1]["text"],
    ),
    "ollama chat": (
        "/api/chat",
        {"messages": HI, "stream": False, "format": PERSON},
        lambda r: r["message"]["content"],
    ),
    "ollama generate": (
        "/api/generate",
        {"prompt": "hi", "stream": False, "format": "json"},
        lambda r: r["response"],
    ),
}


@pytest.mark.parametrize("protocol", FORMATS)
def test_a_json_format_holds_in_every_protocol(gateway, protocol):
    path, body, answer_of = FORMATS[protocol]
    ok = post(gateway, path, {"model": "json", **body})
    assert ok.status_code == 200, ok.text
    assert json.loads(answer_of(ok.json())) == {"name": "Ada", "age": 36}
    instead = post(gateway, path, {"model": "prose", **body})
    # Prose fits no JSON: the grammar's short instance answers (any object in JSON mode).
    json_mode = protocol in ("openai json_object", "ollama generate")
    assert instead.status_code == 200, instead.text
    assert json.loads(answer_of(instead.json())) == ({} if json_mode else {"name": "", "age": 0})


def test_reasoning_stays_free_and_the_answer_after_it_is_held(gateway):
    path, body, answer_of = FORMATS["openai"]
    reply = post(gateway, path, {"model": "thinker", "reasoning_effort": "low", **body}).json()
    assert json.loads(answer_of(reply))["name"] == "Ada"
    assert reply["choices"][0]["message"]["reasoning_content"] == "Free thoughts, not JSON."


def test_openai_chat_parse_reads_the_answer_as_the_model_class(gateway):
    client = gateway.openai()
    parsed = client.chat.completions.parse(model="json", messages=HI, response_format=Person)
    assert parsed.choices[0].message.parsed == Person(name="Ada", age=36)


def test_the_official_ollama_client_sends_a_schema_as_format(gateway):
    reply = gateway.ollama().chat(model="json", messages=HI, format=Person.model_json_schema())
    assert Person.model_validate_json(reply.message.content).age == 36


@pytest.mark.parametrize(
    "schema, feature",
    [({"type": "object", "$dynamicRef": "#a"}, "$dynamicRef"), ({"format": "ipv9"}, "ipv9")],
)
@pytest.mark.parametrize("protocol", ["openai", "responses", "anthropic", "ollama chat"])
def test_a_schema_the_engine_cannot_enforce_is_a_400_naming_the_feature(
    gateway, protocol, schema, feature
):
    path, body, _ = FORMATS[protocol]
    body = json.loads(json.dumps(body).replace(json.dumps(PERSON), json.dumps(schema)))
    response = post(gateway, path, {"model": "json", **body})
    assert response.status_code == 400 and feature in response.text


# Forced calls per protocol: (path, body of a forced call, the call's (name, arguments)).
def _openai_call(r):
    call = r["choices"][0]["message"]["tool_calls"][0]["function"]
    return call["name"], json.loads(call["arguments"])


def _responses_call(r):
    (item,) = [i for i in r["output"] if i["type"] == "function_call"]
    return item["name"], json.loads(item["arguments"])


def _anthropic_call(r):
    (block,) = [b for b in r["content"] if b["type"] == "tool_use"]
    return block["name"], block["input"]


FORCED = {
    "openai required": (
        "/v1/chat/completions",
        {"messages": HI, "tools": [OPENAI_TOOL], "tool_choice": "required"},
        _openai_call,
    ),
    "openai named": (
        "/v1/chat/completions",
        {
            "messages": HI,
            "tools": [OPENAI_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        },
        _openai_call,
    ),
    "responses required": (
        "/v1/responses",
        {"input": "hi", "tools": [RESPONSES_TOOL], "tool_choice": "required"},
        _responses_call,
    ),
    "anthropic any": (
        "/v1/messages",
        {
            "messages": HI,
            "max_tokens": 200,
            "tools": [ANTHROPIC_TOOL],
            "tool_choice": {"type": "any"},
        },
        _anthropic_call,
    ),
    "anthropic tool": (
        "/v1/messages",
        {
            "messages": HI,
            "max_tokens": 200,
            "tools": [ANTHROPIC_TOOL],
            "tool_choice": {"type": "tool", "name": "get_weather"},
        },
        _anthropic_call,
    ),
}


@pytest.mark.parametrize("protocol", FORCED)
def test_a_forced_call_is_constrained_in_every_protocol(gateway, protocol):
    path, body, call_of = FORCED[protocol]
    reply = post(gateway, path, {"model": "caller", **body})
    assert reply.status_code == 200, reply.text
    assert call_of(reply.json()) == ("get_weather", {"city": "Paris"})
    request_id = reply.headers["x-request-id"]
    event = gateway.wait_event("guardrail", request_id=request_id)
    assert event["action"] == "constrained" and event["tool"] == "get_weather"
    instead = post(gateway, path, {"model": "prose", **body})
    assert call_of(instead.json()) == ("get_weather", {"city": ""})  # the grammar's short call


@pytest.mark.parametrize(
    "path, body",
    [
        (
            "/v1/chat/completions",
            {
                "messages": HI,
                "tools": [OPENAI_TOOL],
                "tool_choice": {"type": "function", "function": {"name": "nope"}},
            },
        ),
        (
            "/v1/responses",
            {
                "input": "hi",
                "tools": [RESPONSES_TOOL],
                "tool_choice": {"type": "function", "name": "nope"},
            },
        ),
        (
            "/v1/messages",
            {
                "messages": HI,
                "max_tokens": 9,
                "tools": [ANTHROPIC_TOOL],
                "tool_choice": {"type": "tool", "name": "nope"},
            },
        ),
    ],
)
def test_a_tool_choice_naming_an_unknown_function_is_a_400_naming_it(gateway, path, body):
    response = post(gateway, path, {"model": "caller", **body})
    assert response.status_code == 400 and "'nope'" in response.text


def test_strict_tools_hold_calls_under_auto(gateway):
    strict = {**OPENAI_TOOL, "function": {**OPENAI_TOOL["function"], "strict": True}}
    ok = post(
        gateway, "/v1/chat/completions", {"model": "caller", "messages": HI, "tools": [strict]}
    )
    assert _openai_call(ok.json()) == ("get_weather", {"city": "Paris"})
    narrow = {**PARAMS, "properties": {"city": {"type": "string", "maxLength": 3}}}
    tight = {
        **OPENAI_TOOL,
        "function": {"name": "get_weather", "parameters": narrow, "strict": True},
    }
    body = {"model": "caller", "messages": HI, "tools": [tight]}
    # "Paris" breaks maxLength: the call does not go out; free text may be empty.
    message = post(gateway, "/v1/chat/completions", body).json()["choices"][0]["message"]
    assert not message.get("tool_calls") and not message["content"]


def test_tool_choice_none_offers_no_tools_and_parses_no_calls(gateway):
    plain = {"model": "caller", "messages": HI}
    none = post(
        gateway, "/v1/chat/completions", {**plain, "tools": [OPENAI_TOOL], "tool_choice": "none"}
    )
    without = post(gateway, "/v1/chat/completions", plain)
    message = none.json()["choices"][0]["message"]
    assert "tool_calls" not in message and "<tool_call>" in message["content"]
    assert none.json()["usage"]["prompt_tokens"] == without.json()["usage"]["prompt_tokens"]
    anthropic = {"model": "caller", "messages": HI, "max_tokens": 200}
    none = post(
        gateway,
        "/v1/messages",
        {**anthropic, "tools": [ANTHROPIC_TOOL], "tool_choice": {"type": "none"}},
    )
    assert [b["type"] for b in none.json()["content"]] == ["text"]


def test_parallel_tool_calls_off_gives_one_call(gateway):
    body = {"model": "twice", "messages": HI, "tools": [OPENAI_TOOL]}
    both = post(gateway, "/v1/chat/completions", body).json()
    assert len(both["choices"][0]["message"]["tool_calls"]) == 2
    one = post(gateway, "/v1/chat/completions", {**body, "parallel_tool_calls": False}).json()
    assert len(one["choices"][0]["message"]["tool_calls"]) == 1
    anthropic = {
        "model": "twice",
        "messages": HI,
        "max_tokens": 300,
        "tools": [ANTHROPIC_TOOL],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
    }
    blocks = post(gateway, "/v1/messages", anthropic).json()["content"]
    assert [b["type"] for b in blocks] == ["tool_use"]


def test_openai_logprobs_plain_and_streamed(gateway):
    client = gateway.openai()
    reply = client.chat.completions.create(model="json", messages=HI, logprobs=True, top_logprobs=2)
    content = reply.choices[0].logprobs.content
    assert "".join(t.token for t in content) == reply.choices[0].message.content
    assert all(t.logprob == 0.0 and len(t.top_logprobs) == 1 for t in content)
    stream = client.chat.completions.create(model="json", messages=HI, logprobs=True, stream=True)
    streamed = [
        t
        for c in stream
        if c.choices and c.choices[0].logprobs
        for t in c.choices[0].logprobs.content
    ]
    assert [t.token for t in streamed] == [t.token for t in content]


def test_completions_echo_returns_the_prompts_logprobs_first(gateway):
    reply = post(
        gateway,
        "/v1/completions",
        {"model": "json", "prompt": "ab", "echo": True, "logprobs": 1, "max_tokens": 50},
    ).json()
    choice = reply["choices"][0]
    logprobs = choice["logprobs"]
    assert choice["text"].startswith("ab")
    assert "".join(logprobs["tokens"]) == choice["text"]
    assert logprobs["token_logprobs"][0] is None and logprobs["token_logprobs"][1] == 0.0
    assert logprobs["text_offset"][:3] == [0, 1, 2]


def test_responses_and_ollama_logprobs(gateway):
    body = {
        "model": "json",
        "input": "hi",
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 1,
    }
    part = post(gateway, "/v1/responses", body).json()["output"][-1]["content"][0]
    assert "".join(t["token"] for t in part["logprobs"]) == part["text"]
    ollama = gateway.ollama().chat(model="json", messages=HI, logprobs=True, top_logprobs=1)
    assert "".join(t.token for t in ollama.logprobs) == ollama.message.content


def test_n_choices_come_from_one_request(gateway):
    client = gateway.openai()
    reply = client.chat.completions.create(model="json", messages=HI, n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert {c.message.content for c in reply.choices} == {'{"name": "Ada", "age": 36}'}
    stream = client.chat.completions.create(model="json", messages=HI, n=2, stream=True)
    texts = ["", ""]
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == ['{"name": "Ada", "age": 36}'] * 2
    completions = post(
        gateway, "/v1/completions", {"model": "json", "prompt": ["a", "b"], "n": 2}
    ).json()
    assert [c["index"] for c in completions["choices"]] == [0, 1, 2, 3]
