"""A tool's JSON schema is the client's: it cannot make the gateway fetch anything, read a
file, or stall the event loop — each against a real `gateway serve` process."""

from __future__ import annotations

import http.server
import json
import threading
import time

import httpx
import openai
import pytest

SLOW_PATTERN = r"^(a|a)*$"  # catastrophic backtracking: seconds on a 25-letter non-match
CONFIG = f"""
models:
  - id: echo
    engine: scripted
  - id: caller
    engine: scripted
    script: {{reply: '<tool_call>{{"name": "lookup", "arguments": {{"q": "{"a" * 25}!"}}}}</tool_call>'}}
    guardrails: {{tool_calls: 'off'}}
"""


@pytest.fixture
def hits():
    """A loopback HTTP server that records every path asked of it."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            body = json.dumps({"type": "string"}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], seen
    server.shutdown()
    server.server_close()


def tool(parameters: dict) -> dict:
    return {"type": "function", "function": {"name": "lookup", "parameters": parameters}}


def test_a_reference_outside_the_schema_is_refused_by_name_and_never_fetched(
    start_gateway, hits, tmp_path
):
    port, seen = hits
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"type": "string", "description": "TOP-SECRET-CONTENT"}))
    gateway = start_gateway(CONFIG)
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    for ref in (f"http://127.0.0.1:{port}/schema.json", secret.as_uri(), "#/$defs/missing"):
        parameters = {"type": "object", "properties": {"q": {"$ref": ref}}}
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(
                model="echo",
                messages=[{"role": "user", "content": "hi"}],
                tools=[tool(parameters)],
                tool_choice="required",
            )
        message = refused.value.body["message"]
        assert repr(ref) in message and "$.properties.q.$ref" in message, message
    assert seen == []
    assert "TOP-SECRET-CONTENT" not in gateway.log.read_text()
    # A reference within the schema still works, on the wire and in the guardrails.
    inside = {"type": "object", "properties": {"q": {"$ref": "#/$defs/Q"}}, "$defs": {"Q": {}}}
    answer = client.chat.completions.create(
        model="caller", messages=[{"role": "user", "content": "hi"}], tools=[tool(inside)]
    )
    assert answer.choices[0].message.tool_calls[0].function.name == "lookup"


def test_validating_a_slow_schema_does_not_stall_the_gateway(start_gateway):
    gateway = start_gateway(CONFIG)
    slow = {"type": "object", "properties": {"q": {"type": "string", "pattern": SLOW_PATTERN}}}
    body = {
        "model": "caller",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [tool(slow)],
    }
    answered: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: answered.append(
            httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=120)
        )
    )
    started = time.monotonic()
    request.start()
    waits = []
    while request.is_alive():
        began = time.monotonic()
        assert httpx.get(f"{gateway.url}/health", timeout=60).status_code == 200
        waits.append(time.monotonic() - began)
        time.sleep(0.05)
    took = time.monotonic() - started
    assert answered[0].status_code == 200, answered[0].text
    # The check took seconds (the pattern backtracks), while /health kept answering at once.
    assert took > 1.5, f"the slow pattern took only {took:.2f} s: the test proves nothing"
    assert max(waits) < took / 2, (max(waits), took)
    # ... and it was cut at its deadline, reported as the schema failing (policy `off` passes).
    (event,) = gateway.events("guardrail", model="caller")
    assert "took longer than 2 s" in event["problem"] and event["action"] == "passed"
