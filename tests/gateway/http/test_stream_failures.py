"""An engine fault mid-stream, in every protocol: the stream ends with that protocol's own
error, the log says the request failed (with a traceback), and no internals reach the
client — against a real `gateway serve` on a scripted model that raises after two words."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import serving

SECRET = "tok-0123456789-secret"  # read by the config: the redactor must hide it everywhere
CONFIG = """
models:
  - id: broken
    engine: scripted
    script: {reply: "one ${TEST_SECRET_TOKEN} three four five", fail_after: 2}
"""
CHAT = [{"role": "user", "content": "hello"}]

# (path, body, parse the streamed body into its events, the protocol's in-stream error)
STREAMS = {
    "openai chat": ("/v1/chat/completions", {"model": "broken", "messages": CHAT}),
    "completions": ("/v1/completions", {"model": "broken", "prompt": "hi"}),
    "responses": ("/v1/responses", {"model": "broken", "input": "hello"}),
    "anthropic": ("/v1/messages", {"model": "broken", "messages": CHAT, "max_tokens": 50}),
    "ollama chat": ("/api/chat", {"model": "broken", "messages": CHAT}),
    "ollama generate": ("/api/generate", {"model": "broken", "prompt": "hi"}),
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    directory = tmp_path_factory.mktemp("stream-failures")
    with serving(directory, CONFIG, env={"TEST_SECRET_TOKEN": SECRET}) as process:
        yield process


def sse_events(text: str) -> list[tuple[str | None, str]]:
    """(event name, data) of each server-sent event in `text`."""
    events = []
    for block in text.strip().split("\n\n"):
        name = data = None
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line.partition(":")[2].strip()
            elif line.startswith("data:"):
                data = line.partition(":")[2].strip()
        if data is not None:
            events.append((name, data))
    return events


def last_error(protocol: str, text: str) -> dict:
    """The in-stream error that ends `text`, asserted to be in `protocol`'s own shape."""
    if protocol.startswith("ollama"):
        last = json.loads(text.strip().splitlines()[-1])
        assert set(last) == {"error"}, last
        return last
    name, data = sse_events(text)[-1]
    body = json.loads(data)
    if protocol == "anthropic":
        assert name == "error" and body["type"] == "error", body
        assert body["error"]["type"] == "api_error", body
    elif protocol == "responses":
        assert name == "error" and body["type"] == "error", body
        assert body["code"] == "server_error", body
    else:
        assert body["error"]["type"] == "server_error", body
        assert "[DONE]" not in text
    return body


@pytest.mark.parametrize("protocol", list(STREAMS))
def test_an_engine_fault_mid_stream_ends_with_the_protocols_error(gateway, protocol):
    path, body = STREAMS[protocol]
    if not protocol.startswith("ollama"):
        body = body | {"stream": True}
    response = httpx.post(gateway.url + path, json=body, timeout=30)
    assert response.status_code == 200  # the failure came after the first words went out
    assert "one" in response.text  # the words before the fault were delivered
    error = last_error(protocol, response.text)
    assert "scripted failure" not in json.dumps(error)  # no internals to the client
    request_id = response.headers["x-request-id"]
    finished = gateway.wait_event("request_finished", request_id=request_id)
    assert finished["status"] == 500, finished
    assert "RuntimeError" in finished["error"], finished


def assert_logged_once(gateway, request_id: str) -> None:
    """One `internal_error` line for the request: level error, type, message, traceback."""
    gateway.wait_event("request_finished", request_id=request_id)
    logged = gateway.events("internal_error", request_id=request_id)
    assert len(logged) == 1, logged
    event = logged[0]
    assert event["level"] == "error"
    assert event["type"] == "builtins.RuntimeError"
    assert event["message"].startswith("scripted failure after 2 words")
    assert event["traceback"].startswith("Traceback (most recent call last)")
    assert "engines/scripted.py" in event["traceback"]
    # The fault's message holds the secret the reply carried; the log holds `***` instead.
    assert "***" in event["message"] and "***" in event["traceback"]
    assert SECRET not in gateway.log.read_text()


@pytest.mark.parametrize("protocol", list(STREAMS))
def test_an_unexpected_fault_is_logged_with_its_traceback_and_the_client_gets_a_request_id(
    gateway, protocol
):
    path, body = STREAMS[protocol]
    for stream in (False, True):
        response = httpx.post(gateway.url + path, json=body | {"stream": stream}, timeout=30)
        request_id = response.headers["x-request-id"]
        if stream:
            error = last_error(protocol, response.text)
        else:
            assert response.status_code == 500, response.text
            error = response.json()
        text = json.dumps(error)
        assert f"internal error (request id {request_id})" in text, text
        assert "Traceback" not in text and "scripted" not in text and SECRET not in text
        assert_logged_once(gateway, request_id)
