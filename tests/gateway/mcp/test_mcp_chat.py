"""MCP tools on chat completions, Anthropic Messages and Ollama's chat (`tools_from`,
`run_tools`), through the openai, anthropic and ollama SDKs over HTTP: a real MCP server (tool_server.py over stdio),
scripted models so each call is deterministic. The loop the gateway runs, calls returned to
the client, a key not allowed the server, a tool error the model hears, name clashes, a
round that also calls the client's own tool, the bound on calls, a server that never
starts, and the Activity capture of a call's arguments and result (redacted)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import serving

SERVER = Path(__file__).with_name("tool_server.py")
ADMIN = {"Authorization": "Bearer admin-secret"}


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


CONFIG = """
server:
  admin_key: admin-secret
  api_keys:
    - {{key: full-key, label: full}}
    - {{key: limited-key, label: limited, mcp_servers: [other]}}
    - {{key: own-loop-key, label: own-loop, run_tools: false}}
    - {{key: loop-key, label: loop, run_tools: true}}
mcp_servers:
  - {{name: tools, command: {python}, args: [{server}], timeout: 3s}}
  - {{name: other, command: {python}, args: [{server}], allowed_tools: [shout]}}
  - {{name: never-starts, command: {python}, args: ["-c", "import time; time.sleep(60)"], start_timeout: 1s}}
models:
  - id: runner
    engine: scripted
    tools_from: [tools]
    run_tools: true
    script: {{replies: ['Checking. {add}', 'The sum is 5.']}}
  - id: returner
    engine: scripted
    tools_from: [tools]
    script: {{reply: '{add}'}}
  - id: keyed
    engine: scripted
    tools_from: [tools]
    run_tools: true
    script: {{reply: '{add}'}}
  - id: optin
    engine: scripted
    tools_from: [tools]
    script: {{replies: ['{add}', 'Five.']}}
  - id: failing
    engine: scripted
    tools_from: [tools]
    run_tools: true
    capture: true
    script: {{replies: ['{boom}', 'The tool failed.']}}
  - id: capturer
    engine: scripted
    tools_from: [other]
    run_tools: true
    capture: true
    script: {{replies: ['{shout}', 'Loud.']}}
  - id: mixed
    engine: scripted
    tools_from: [tools]
    run_tools: true
    script: {{reply: '{add}{lookup}'}}
  - id: looping
    engine: scripted
    tools_from: [tools]
    run_tools: true
    script: {{reply: '{add}'}}
  - id: stranded
    engine: scripted
    tools_from: [never-starts, other]
    script: {{reply: 'No tools today.'}}
"""

LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "The client's own tool.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    text = CONFIG.format(
        python=sys.executable,
        server=SERVER,
        add=call("add", a=2, b=3),
        boom=call("boom", reason="no luck"),
        shout=call("shout", text="my token: Bearer abcdefgh12345678"),
        lookup=call("lookup", q="x"),
    )
    with serving(tmp_path_factory.mktemp("mcp-chat"), text) as process:
        yield process


@pytest.fixture(scope="module")
def client(gateway):
    return gateway.openai("full-key")


def activity_row(gateway, request_id: str, until: str) -> dict:
    """The request's Activity row (with its capture), once `until` is in it (written from a
    thread: a moment after the answer)."""
    found, deadline = {}, time.monotonic() + 10
    while time.monotonic() < deadline:
        found = httpx.get(f"{gateway.url}/ui/api/activity/{request_id}", headers=ADMIN).json()
        if until in json.dumps(found.get("row") or {}):
            break
        time.sleep(0.1)
    return found["row"]


def calls_of(gateway, request_id: str) -> list[dict]:
    return gateway.events("tool_called", request_id=request_id)


def test_chat_completions_run_the_mcp_tool_and_answer(gateway, client):
    raw = client.chat.completions.with_raw_response.create(
        model="runner", messages=[{"role": "user", "content": "What is 2 + 3?"}]
    )
    completion = raw.parse()
    (choice,) = completion.choices
    # One answer: the first round's words, a break, the answer after the result was heard.
    assert choice.message.content == "Checking. \n\nThe sum is 5."
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    # Usage counts both generations: the second prompt holds the first answer and the result.
    assert completion.usage.prompt_tokens > 2 * len("What is 2 + 3?")
    request_id = raw.headers["x-request-id"]
    (made,) = calls_of(gateway, request_id)
    assert (made["server"], made["tool"], made["bytes"], made["error"]) == ("tools", "add", 1, None)
    assert made["key_label"] == "full" and "arguments" not in made
    row = activity_row(gateway, request_id, "tool_calls")
    assert (row["detail"]["tool_calls"], row["detail"]["tools"]) == (1, "tools.add")
    assert row["capture"] is None  # `runner` does not capture: no argument or result kept


def test_a_streamed_chat_completion_shows_no_server_run_call(client):
    stream = client.chat.completions.create(
        model="runner",
        messages=[{"role": "user", "content": "What is 2 + 3?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert all(not d.tool_calls for d in deltas)  # never a half (or whole) call of `add`
    assert "".join(d.content or "" for d in deltas) == "Checking. \n\nThe sum is 5."
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert [f for f in finishes if f] == ["stop"]
    assert chunks[-1].usage.prompt_tokens > 2 * len("What is 2 + 3?")


def test_anthropic_messages_run_the_same_loop(gateway):
    anthropic = gateway.anthropic("full-key")
    asked = [{"role": "user", "content": "What is 2 + 3?"}]
    message = anthropic.messages.create(model="runner", max_tokens=100, messages=asked)
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "Checking. \n\nThe sum is 5."
    assert message.stop_reason == "end_turn"
    with anthropic.messages.stream(model="runner", max_tokens=100, messages=asked) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert all(e.type != "content_block_start" or e.content_block.type == "text" for e in events)
    assert final.content[0].text == "Checking. \n\nThe sum is 5."
    assert final.stop_reason == "end_turn"


def test_ollama_chat_runs_the_same_loop(gateway):
    import ollama

    local = ollama.Client(host=gateway.url, headers={"Authorization": "Bearer full-key"})
    gateway.clients.append(local)  # closed with the gateway
    asked = [{"role": "user", "content": "What is 2 + 3?"}]
    reply = local.chat(model="runner", messages=asked)
    assert reply.message.content == "Checking. \n\nThe sum is 5." and not reply.message.tool_calls
    parts = list(local.chat(model="runner", messages=asked, stream=True))
    assert all(not p.message.tool_calls for p in parts)
    assert "".join(p.message.content for p in parts) == "Checking. \n\nThe sum is 5."
    assert parts[-1].done and parts[-1].done_reason == "stop"


def test_without_run_tools_the_call_goes_back_to_the_client(gateway, client):
    raw = client.chat.completions.with_raw_response.create(
        model="returner", messages=[{"role": "user", "content": "go"}]
    )
    (choice,) = raw.parse().choices
    assert choice.finish_reason == "tool_calls"
    (made,) = choice.message.tool_calls
    assert (made.function.name, json.loads(made.function.arguments)) == ("add", {"a": 2, "b": 3})
    assert calls_of(gateway, raw.headers["x-request-id"]) == []  # the gateway made none
    message = gateway.anthropic("full-key").messages.create(
        model="returner", max_tokens=300, messages=[{"role": "user", "content": "go"}]
    )
    assert message.stop_reason == "tool_use"
    (use,) = [b for b in message.content if b.type == "tool_use"]
    assert (use.name, use.input) == ("add", {"a": 2, "b": 3})


def test_a_keys_run_tools_false_returns_the_call_of_a_run_tools_model(gateway):
    own = gateway.openai("own-loop-key")
    (choice,) = own.chat.completions.create(
        model="keyed", messages=[{"role": "user", "content": "go"}]
    ).choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.name == "add"


def test_a_keys_run_tools_true_runs_the_calls_of_a_model_that_does_not(gateway):
    raw = gateway.openai("loop-key").chat.completions.with_raw_response.create(
        model="optin", messages=[{"role": "user", "content": "go"}]
    )
    assert raw.parse().choices[0].message.content == "Five."
    assert [c["tool"] for c in calls_of(gateway, raw.headers["x-request-id"])] == ["add"]


def test_a_key_not_allowed_the_server_is_offered_none_of_its_tools(gateway):
    limited = gateway.openai("limited-key")
    (choice,) = limited.chat.completions.create(
        model="returner", messages=[{"role": "user", "content": "go"}]
    ).choices
    # No tool offered: the script's call is only text, and nothing was called.
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert "<tool_call>" in choice.message.content
    message = gateway.anthropic("limited-key").messages.create(
        model="returner", max_tokens=300, messages=[{"role": "user", "content": "go"}]
    )
    assert [b.type for b in message.content] == ["text"]


def test_a_tool_error_reaches_the_model_as_an_error_result(gateway, client):
    raw = client.chat.completions.with_raw_response.create(
        model="failing", messages=[{"role": "user", "content": "go"}]
    )
    assert raw.status_code == 200
    assert raw.parse().choices[0].message.content == "The tool failed."
    request_id = raw.headers["x-request-id"]
    (made,) = calls_of(gateway, request_id)
    assert made["tool"] == "boom" and "boom: no luck" in made["error"]
    row = activity_row(gateway, request_id, "tool_errors")
    assert row["detail"]["tool_errors"] == 1
    # `capture: true`: what the tool said, as the model heard it (an error result).
    (kept,) = json.loads(row["capture"]["tool_calls"])
    assert kept["tool"] == "boom" and "boom: no luck" in kept["error"]
    assert json.loads(kept["arguments"]) == {"reason": "no luck"}


def test_capture_keeps_a_calls_arguments_and_result_redacted(gateway, client):
    raw = client.chat.completions.with_raw_response.create(
        model="capturer", messages=[{"role": "user", "content": "shout"}]
    )
    assert raw.parse().choices[0].message.content == "Loud."
    request_id = raw.headers["x-request-id"]
    row = activity_row(gateway, request_id, "tool_calls")
    kept = row["capture"]["tool_calls"]
    (call_kept,) = json.loads(kept)
    assert (call_kept["server"], call_kept["tool"], call_kept["error"]) == ("other", "shout", None)
    assert call_kept["result"].startswith("MY TOKEN: BEARER")
    assert "abcdefgh12345678" not in kept.lower()  # the bearer token redacted, both ways
    # Nothing of it in the event log.
    assert "abcdefgh12345678" not in gateway.log.read_text().lower()
    # Streamed, the same is kept (the calls are made while the body goes out).
    raw = client.chat.completions.with_raw_response.create(
        model="capturer", messages=[{"role": "user", "content": "shout"}], stream=True
    )
    said = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert said == "Loud."
    row = activity_row(gateway, raw.headers["x-request-id"], "tool_calls")
    (streamed,) = json.loads(row["capture"]["tool_calls"])
    assert streamed["tool"] == "shout" and streamed["result"] == call_kept["result"]


def test_a_clients_tool_of_the_same_name_wins_and_goes_back_to_it(gateway, client):
    own_add = {
        "type": "function",
        "function": {"name": "add", "parameters": {"type": "object", "properties": {}}},
    }
    raw = client.chat.completions.with_raw_response.create(
        model="keyed", messages=[{"role": "user", "content": "go"}], tools=[own_add]
    )
    (choice,) = raw.parse().choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.name == "add"
    assert calls_of(gateway, raw.headers["x-request-id"]) == []


def test_a_round_calling_a_client_tool_ends_with_that_call_only(gateway, client):
    raw = client.chat.completions.with_raw_response.create(
        model="mixed", messages=[{"role": "user", "content": "go"}], tools=[LOOKUP]
    )
    (choice,) = raw.parse().choices
    assert choice.finish_reason == "tool_calls"
    assert [c.function.name for c in choice.message.tool_calls] == ["lookup"]
    assert calls_of(gateway, raw.headers["x-request-id"]) == []  # that round's `add` not made


def test_the_loop_is_bounded(gateway, client):
    raw = client.chat.completions.with_raw_response.create(
        model="looping", messages=[{"role": "user", "content": "go"}]
    )
    (choice,) = raw.parse().choices
    assert len(calls_of(gateway, raw.headers["x-request-id"])) == 8
    # Asked again without the MCP tools, the model's call is only text; it answered.
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert "<tool_call>" in choice.message.content


def test_a_server_that_never_starts_leaves_the_request_without_its_tools(gateway, client):
    raw = client.chat.completions.with_raw_response.create(
        model="stranded", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.status_code == 200
    assert raw.parse().choices[0].message.content == "No tools today."
    assert raw.headers["x-gateway-mcp-unavailable"] == "never-starts"
