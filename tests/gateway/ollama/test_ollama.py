"""The Ollama protocol on a real gateway process with scripted models, via the `ollama` package."""

from __future__ import annotations

import json

import httpx
import ollama
import pytest
from conftest import serving

REPLY = "hello from echo, café 😀 done"
WEATHER_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
CONFIG = f"""
models:
  - id: echo
    engine: scripted
    aliases: [e]
    script: {{reply: "{REPLY}"}}
    sampling: {{temperature: 0.5, max_tokens: 64}}
  - id: tools
    engine: scripted
    script: {{reply: '{WEATHER_CALL}'}}
  - id: lazy
    engine: scripted
    residency: {{on_demand: true}}
"""
HELLO = [{"role": "user", "content": "hi"}]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("ollama"), CONFIG) as process:
        yield process


def post(gateway, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{gateway.url}{path}", json=body, timeout=30)


def test_chat_streamed_equals_plain_and_counts_equal_the_generated_event(gateway, ollama_client):
    plain = post(gateway, "/api/chat", {"model": "echo", "messages": HELLO, "stream": False})
    assert plain.status_code == 200
    body = plain.json()
    assert body["message"] == {"role": "assistant", "content": REPLY}
    assert body["done"] is True and body["done_reason"] == "stop"
    assert body["model"] == "echo" and body["created_at"].endswith("Z")
    generated = gateway.wait_event("generated", request_id=plain.headers["x-request-id"])
    assert body["prompt_eval_count"] == generated["prompt_tokens"]
    assert body["eval_count"] == generated["new_tokens"]
    for field in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
        assert isinstance(body[field], int) and body[field] >= 0

    parts = list(ollama_client.chat(model="echo", messages=HELLO, stream=True))
    assert "".join(p.message.content for p in parts) == REPLY
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    last = parts[-1]
    assert (last.eval_count, last.prompt_eval_count) == (
        body["eval_count"],
        body["prompt_eval_count"],
    )
    assert last.done_reason == "stop" and last.total_duration >= last.eval_duration

    whole = ollama_client.chat(model="echo", messages=HELLO, stream=False)
    assert whole.message.content == REPLY and whole.eval_count == body["eval_count"]


def test_generate_streamed_equals_plain_with_system_and_raw(gateway, ollama_client):
    plain = ollama_client.generate(model="echo", prompt="hi", system="be brief", stream=False)
    streamed = list(
        ollama_client.generate(model="echo", prompt="hi", system="be brief", stream=True)
    )
    assert plain.response == "".join(p.response for p in streamed) == REPLY
    assert streamed[-1].done and streamed[-1].eval_count == plain.eval_count
    # The system turn is part of the prompt the engine counted.
    bare = ollama_client.generate(model="echo", prompt="hi", stream=False)
    assert plain.prompt_eval_count > bare.prompt_eval_count
    # raw: the prompt goes to the model as is, without a template (and without the system).
    raw = post(
        gateway, "/api/generate", {"model": "echo", "prompt": "hi", "raw": True, "stream": False}
    )
    assert raw.status_code == 200 and raw.json()["response"] == REPLY
    generated = gateway.wait_event("generated", request_id=raw.headers["x-request-id"])
    assert raw.json()["prompt_eval_count"] == generated["prompt_tokens"] < bare.prompt_eval_count


def test_ndjson_framing(gateway):
    body = {"model": "echo", "messages": HELLO}  # streaming is Ollama's default
    with httpx.stream("POST", f"{gateway.url}/api/chat", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        lines = [line for line in response.iter_lines()]
    objects = [json.loads(line) for line in lines]  # each line is one whole JSON object
    assert all(line.strip() for line in lines)
    assert [o["done"] for o in objects] == [False] * (len(objects) - 1) + [True]
    assert "done_reason" not in objects[0] and "eval_count" not in objects[0]
    assert objects[-1]["message"]["content"] == "" and objects[-1]["eval_count"] > 0
    with httpx.stream(
        "POST", f"{gateway.url}/api/generate", json={"model": "echo", "prompt": "hi"}, timeout=30
    ) as response:
        objects = [json.loads(line) for line in response.iter_lines()]
    assert "".join(o["response"] for o in objects) == REPLY and objects[-1]["done"] is True


def test_options_map_to_the_canonical_request(ollama_client):
    short = ollama_client.chat(
        model="echo", messages=HELLO, options={"num_predict": 10}, stream=False
    )
    assert short.done_reason == "length" and short.eval_count <= 10
    assert REPLY.startswith(short.message.content) and short.message.content != REPLY
    streamed = list(
        ollama_client.chat(model="echo", messages=HELLO, options={"num_predict": 10}, stream=True)
    )
    assert streamed[-1].done_reason == "length" and streamed[-1].eval_count == short.eval_count
    for unlimited in (-1, -2, 0):  # the model's default (here 64 tokens: the whole reply)
        reply = ollama_client.generate(
            model="echo", prompt="hi", options={"num_predict": unlimited}
        )
        assert reply.response == REPLY and reply.done_reason == "stop"
    stopped = ollama_client.generate(model="echo", prompt="hi", options={"stop": ["café"]})
    assert stopped.response == "hello from echo, " and stopped.done_reason == "stop"
    # A num_ctx wider than the model's window cannot widen it (test_ollama_options.py).
    wide = ollama_client.generate(
        model="echo",
        prompt="hi",
        options={
            "num_ctx": 1_000_000,
            "temperature": 0,
            "top_p": 0.9,
            "top_k": 40,
            "seed": 7,
            "min_p": 0.05,
        },
        keep_alive="5m",
        think=True,
    )
    assert wide.response == REPLY


@pytest.mark.parametrize(
    "options, field",
    [
        ({"temperature": -1}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"num_predict": -3}, "num_predict"),
        ({"num_ctx": 0}, "num_ctx"),
        ({"stop": [1]}, "stop"),
    ],
)
def test_bad_options_are_400s_naming_the_field(ollama_client, options, field):
    with pytest.raises(ollama.ResponseError) as refused:
        ollama_client.chat(model="echo", messages=HELLO, options=options, stream=False)
    assert refused.value.status_code == 400
    assert f"$.options.{field}" in refused.value.error


def test_latest_tags_resolve_to_the_bare_name(gateway, ollama_client):
    assert ollama_client.chat(model="echo:latest", messages=HELLO).message.content == REPLY
    assert ollama_client.generate(model="e:latest", prompt="hi").response == REPLY
    routed = gateway.wait_event("request_routed", requested="e:latest")
    assert (routed["served"], routed["alias"], routed["protocol"]) == ("echo", "e", "ollama")
    assert ollama_client.show("echo:latest").details.format == "scripted"


def test_tags_version_and_show(gateway, ollama_client):
    listed = {m.model: m for m in ollama_client.list().models}
    assert set(listed) == {"echo", "e", "tools", "lazy"}
    assert listed["e"].digest == listed["echo"].digest != listed["tools"].digest
    assert listed["echo"].details.format == "scripted" and listed["echo"].size == 0
    assert listed["echo"].modified_at is not None

    reply = httpx.get(f"{gateway.url}/api/version").json()
    assert reply == {
        "version": "0.12.11"
    }  # the Ollama API matched (tests/gateway/test_model_cards.py)

    shown = ollama_client.show("e")
    assert shown.capabilities == ["completion", "tools"]
    assert shown.modelinfo["general.architecture"] == "scripted"
    assert shown.modelinfo["scripted.context_length"] == 8192
    assert "temperature 0.5" in shown.parameters and "num_predict 64" in shown.parameters
    assert "<|im_start|>" in shown.template and shown.details.family == "scripted"


def test_ps_lists_what_is_loaded_and_never_loads(gateway, ollama_client):
    def loaded() -> set[str]:
        return {m.model for m in ollama_client.ps().models}

    assert loaded() == {"echo", "tools"}  # pinned; `lazy` loads at first use
    health = httpx.get(f"{gateway.url}/health").json()
    assert health["models"]["lazy"]["state"] == "unloaded"
    running = {m.model: m for m in ollama_client.ps().models}["echo"]
    assert running.size_vram == 0 and running.expires_at.year > 2100
    assert running.context_length == 8192

    # An empty prompt is Ollama's load request: it loads the model and generates nothing.
    load = ollama_client.generate(model="lazy", prompt="")
    assert (load.done, load.done_reason, load.response) == (True, "load", "")
    assert loaded() == {"echo", "tools", "lazy"}
    assert not gateway.events("generated", model="lazy")
    chat_load = post(gateway, "/api/chat", {"model": "lazy", "messages": []})
    assert chat_load.json()["done_reason"] == "load"
    assert chat_load.json()["message"] == {"role": "assistant", "content": ""}


def test_tool_calls_round_trip(ollama_client):
    reply = ollama_client.chat(model="tools", messages=HELLO, tools=[WEATHER_TOOL], stream=False)
    calls = reply.message.tool_calls
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert reply.done_reason == "stop" and reply.message.content == ""
    streamed = list(
        ollama_client.chat(model="tools", messages=HELLO, tools=[WEATHER_TOOL], stream=True)
    )
    streamed_calls = [c for p in streamed for c in p.message.tool_calls or []]
    assert [(c.function.name, dict(c.function.arguments)) for c in streamed_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    follow_up = [
        *HELLO,
        reply.message,
        {"role": "tool", "content": "sunny, 21 °C", "tool_name": "get_weather"},
    ]
    answer = ollama_client.chat(model="echo", messages=follow_up, tools=[WEATHER_TOOL])
    assert answer.message.content == REPLY
    # The call and its result are part of the prompt the model saw.
    assert answer.prompt_eval_count > reply.prompt_eval_count + len("sunny, 21 °C")


def test_unknown_model_is_404_in_ollama_shape(gateway, ollama_client):
    with pytest.raises(ollama.ResponseError) as missing:
        ollama_client.chat(model="llama3:8b", messages=HELLO)
    assert missing.value.status_code == 404
    assert "llama3:8b" in missing.value.error and "echo" in missing.value.error
    with pytest.raises(ollama.ResponseError) as missing:
        ollama_client.show("llama3")
    assert missing.value.status_code == 404
    response = post(gateway, "/api/generate", {"model": "nope", "prompt": "hi"})
    assert response.status_code == 404 and set(response.json()) == {"error"}


@pytest.mark.parametrize(
    "path, payload, fragment",
    [
        ("/api/chat", b"not json", "not valid JSON"),
        ("/api/chat", b"", "empty"),
        ("/api/chat", b'{"messages": []}', "model"),
        ("/api/chat", b'{"model": "echo", "messages": [{"role": "wizard"}]}', "$.messages[0].role"),
        ("/api/chat", b'{"model": "echo", "messages": [], "stream": "yes"}', "$.stream"),
        (
            "/api/chat",
            b'{"model": "echo", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}',
            "images",
        ),
        (
            "/api/chat",
            b'{"model": "echo", "messages": [{"role": "user", "content": "x"}], "format": "yaml"}',
            "$.format",
        ),
        (
            "/api/generate",
            b'{"model": "echo", "prompt": "x", "format": {"type": "object", "$dynamicRef": "#a"}}',
            "$dynamicRef",
        ),
        ("/api/generate", b'{"model": "echo", "prompt": "x", "suffix": "y"}', "suffix"),
        ("/api/generate", b'{"model": "echo", "prompt": "x", "images": ["aGk="]}', "images"),
        ("/api/show", b"{}", "$.model"),
    ],
)
def test_bad_requests_are_400s_in_ollama_shape(gateway, path, payload, fragment):
    response = httpx.post(
        f"{gateway.url}{path}", content=payload, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert set(response.json()) == {"error"} and fragment in response.json()["error"]
