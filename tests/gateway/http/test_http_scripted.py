"""The real gateway process on scripted models: routing, errors, queueing and events over HTTP."""

from __future__ import annotations

import asyncio
import threading

import httpx
import openai
import pytest

CONFIG = """
server:
  fallback: echo
models:
  - id: echo
    engine: scripted
    aliases: [e, gpt-4o-mini]
    script: {reply: "hello from echo, café 😀 done"}
  - id: slow
    engine: scripted
    script: {reply: "one two three four five six seven eight nine ten", token_delay: 0.1}
    queue: {max_depth: 1, max_wait: 30s}
"""

NO_FALLBACK = """
models:
  - id: echo
    engine: scripted
    aliases: [e]
"""

HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture
def gateway(start_gateway):
    return start_gateway(CONFIG)


def chat(gateway, **body):
    return httpx.post(
        f"{gateway.url}/v1/chat/completions", json={"messages": HELLO, **body}, timeout=30
    )


def test_routes_by_id_alias_and_fallback_and_logs_each(gateway):
    client = gateway.openai()
    for name, alias, fallback in [
        ("echo", None, False),
        ("gpt-4o-mini", "gpt-4o-mini", False),
        ("no-such-model", None, True),
    ]:
        reply = client.chat.completions.create(model=name, messages=HELLO)
        assert reply.model == "echo"
        assert reply.choices[0].message.content == "hello from echo, café 😀 done"
        routed = gateway.wait_event("request_routed", requested=name)
        assert (routed["served"], routed["alias"], routed["fallback"]) == ("echo", alias, fallback)


def test_usage_equals_the_generated_event_and_one_request_id_ties_the_lines(gateway):
    response = chat(gateway, model="echo")
    usage = response.json()["usage"]
    request_id = response.headers["x-request-id"]
    gateway.wait_event("request_finished", request_id=request_id)
    lines = [e["event"] for e in gateway.events(request_id=request_id)]
    assert lines == [
        "request_started",
        "request_routed",
        "request_queued",
        "generated",
        "request_finished",
    ]
    generated = gateway.events("generated", request_id=request_id)[0]
    assert usage["prompt_tokens"] == generated["prompt_tokens"]
    assert usage["completion_tokens"] == generated["new_tokens"]
    for line in gateway.events(request_id=request_id):
        assert {"event", "ts", "level", "request_id"} <= line.keys()


def test_streamed_text_and_usage_match_the_plain_answer(gateway):
    client = gateway.openai()
    plain = client.chat.completions.create(model="e", messages=HELLO)
    chunks = list(
        client.chat.completions.create(
            model="e", messages=HELLO, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_stop_strings_and_max_tokens(gateway):
    body = chat(gateway, model="echo", stop=["café"]).json()
    assert body["choices"][0]["message"]["content"] == "hello from echo, "
    body = chat(gateway, model="echo", max_tokens=10).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] <= 10


@pytest.mark.parametrize(
    "payload, fragment",
    [
        (b"not json", "not valid JSON"),
        (b"[1, 2]", "Expected `object`"),
        (b'{"model": "echo", "messages": []}', "$.messages"),
        (
            b'{"model": "echo", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
            "$.temperature",
        ),
        (
            b'{"model": "echo", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
            "$.temperature: NaN is not a number",
        ),
        (
            b'{"model": "echo", "messages": [{"role": "user", "content": "x"}], "top_p": 1e999}',
            "$.top_p",
        ),
        (
            b'{"model": "echo", "messages": [{"role": "user", "content": "x"}], "max_tokens": -5}',
            "$.max_tokens",
        ),
        (
            b'{"model": "echo", "messages": [{"role": "wizard", "content": "x"}]}',
            "$.messages[0].role",
        ),
        (b'{"model": "echo", "messages": [{"role": "user", "content": "x"}], "n": 9}', "$.n"),
        (b"", "empty"),
    ],
)
def test_bad_requests_get_openai_shaped_400s_and_serving_goes_on(gateway, payload, fragment):
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        content=payload,
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"
    assert chat(gateway, model="echo").status_code == 200


def test_unknown_model_without_fallback_is_404_naming_known_ids(start_gateway):
    gateway = start_gateway(NO_FALLBACK)
    client = gateway.openai()
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-5", messages=HELLO)
    message = missing.value.body["message"]
    assert "gpt-5" in message and "echo" in message and "e" in message
    assert "/" not in message  # never a filesystem path


def test_models_lists_ids_and_aliases(gateway):
    ids = {m.id for m in gateway.openai().models.list()}
    assert ids == {"echo", "e", "gpt-4o-mini", "slow"}


def test_full_queue_answers_429_with_retry_after_and_health_answers_while_busy(gateway):
    def stream_slow():
        with httpx.stream(
            "POST",
            f"{gateway.url}/v1/chat/completions",
            timeout=30,
            json={"model": "slow", "messages": HELLO, "stream": True},
        ) as r:
            for _ in r.iter_lines():
                pass

    streams = [threading.Thread(target=stream_slow) for _ in range(2)]
    streams[0].start()
    _wait_running(gateway, "slow")
    streams[1].start()  # waits in the queue: depth 1 of max_depth 1
    _wait_depth(gateway, "slow", 1)
    refused = chat(gateway, model="slow")
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["type"] == "rate_limit_error"
    health = httpx.get(f"{gateway.url}/health", timeout=2).json()
    assert health["models"]["slow"] == {"state": "ready", "queue_depth": 1, "running": 1}
    for thread in streams:
        thread.join()


def test_client_leaving_while_queued_never_generates_and_mid_stream_stops(gateway):
    async def scenario():
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as client:
            body = {"model": "slow", "messages": HELLO, "stream": True}
            async with client.stream("POST", "/v1/chat/completions", json=body) as first:
                lines = first.aiter_lines()
                await anext(lines)
                # A second client queues behind the first, then gives up.
                queued = asyncio.ensure_future(
                    client.post("/v1/chat/completions", json={"model": "slow", "messages": HELLO})
                )
                await asyncio.sleep(0.3)
                queued.cancel()
                await asyncio.gather(queued, return_exceptions=True)
            # Leaving the `with` closed the first stream mid-generation.

    asyncio.run(scenario())
    generated = gateway.wait_event("generated", model="slow")
    assert generated["stop_reason"] == "cancelled"
    assert generated["new_tokens"] < len("one two three four five six seven eight nine ten")
    finished = gateway.wait_event("request_finished", status=499)
    assert finished
    assert len(gateway.events("generated", model="slow")) == 1  # the queued one never ran


def _wait_running(gateway, model):
    _wait_health(gateway, model, lambda m: m["running"] == 1)


def _wait_depth(gateway, model, depth):
    _wait_health(gateway, model, lambda m: m["queue_depth"] == depth)


def _wait_health(gateway, model, condition, timeout=10):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition(httpx.get(f"{gateway.url}/health").json()["models"][model]):
            return
        time.sleep(0.02)
    raise TimeoutError(f"{model} never reached the expected state")


def test_api_keys_guard_every_route_but_health(start_gateway):
    gateway = start_gateway(
        """
        server:
          api_keys: ["${TEST_GATEWAY_KEY}"]
        models:
          - id: echo
            engine: scripted
        """,
        env={"TEST_GATEWAY_KEY": "sekret-123"},
    )
    assert httpx.get(f"{gateway.url}/health").status_code == 200
    for headers in [{}, {"authorization": "Bearer wrong"}, {"x-api-key": "sekret-12"}]:
        response = httpx.get(f"{gateway.url}/v1/models", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{gateway.url}/v1/models", headers={"x-api-key": "sekret-123"}).is_success
    client = gateway.openai("sekret-123")
    assert client.chat.completions.create(model="echo", messages=HELLO).choices
    assert "sekret-123" not in gateway.log.read_text()
