"""The gateway's MCP tool loop on `/v1/responses`, through the openai SDK over HTTP: a real MCP
server (tool_server.py, on the SDK's MCPServer) over stdio and over streamable HTTP, scripted
models so each tool call is deterministic, and what fails: a tool error, a tool that hangs,
a server that dies mid-call, one that never starts, a key not allowed, a server_url of the
request's own."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from conftest import free_port, serving

SERVER = Path(__file__).with_name("tool_server.py")


def call(name: str, **arguments) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


CONFIG = """
server:
  admin_key: admin-secret
  api_keys:
    - {{key: full-key, label: full}}
    - {{key: limited-key, label: limited, mcp_servers: [remote]}}
mcp_servers:
  - {{name: tools, command: {python}, args: [{server}], timeout: 3s}}
  - {{name: fragile, command: {python}, args: [{server}], timeout: 5s}}
  - name: remote
    url: http://127.0.0.1:{port}/mcp
    headers: {{Authorization: "Bearer ${{MCP_TOKEN}}"}}
    allowed_tools: [add, shout]
    max_result_bytes: 16B
  - {{name: growing, command: {python}, args: [{server}]}}
  - {{name: never-starts, command: {python}, args: ["-c", "import time; time.sleep(60)"], start_timeout: 2s}}
models:
  - id: adder
    engine: scripted
    script: {{replies: ['Checking. {add}', 'The sum is 5.']}}
  - id: remote-adder
    engine: scripted
    script: {{replies: ['{add}', 'Five.']}}
  - id: failing
    engine: scripted
    script: {{replies: ['{boom}', 'The tool failed.']}}
  - id: hanging
    engine: scripted
    script: {{replies: ['{hang}', 'It took too long.']}}
  - id: dying
    engine: scripted
    script: {{replies: ['{die}', 'The server died.', '{add}', 'Back: 5.']}}
  - id: looping
    engine: scripted
    script: {{reply: '{add}'}}
  - id: shouter
    engine: scripted
    script: {{replies: ['{shout}', 'Loud.']}}
  - id: grower
    engine: scripted
    script: {{replies: ['{grow}', 'Grown.']}}
  - id: approver
    engine: scripted
    script: {{replies: ['{add}', 'Approved: 5.', '{add}', 'Not run, then.']}}
"""


@pytest.fixture(scope="module")
def remote_port():
    """tool_server.py over streamable HTTP on a free port, for the `remote` server."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    yield port
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, remote_port):
    text = CONFIG.format(
        python=sys.executable,
        server=SERVER,
        port=remote_port,
        add=call("add", a=2, b=3),
        boom=call("boom", reason="no luck"),
        hang=call("hang", seconds=30),
        die=call("die"),
        grow=call("grow"),
        shout=call("shout", text="a result longer than sixteen bytes"),
    )
    # The server's token: the session-end check fails the run if any log line holds it.
    env = {"MCP_TOKEN": "mcp-secret-token-4d1f"}
    with serving(tmp_path_factory.mktemp("mcp"), text, env=env) as process:
        yield process


@pytest.fixture(scope="module")
def client(gateway):
    return gateway.openai("full-key")


def mcp(label: str = "tools", **fields) -> dict:
    return {"type": "mcp", "server_label": label, "require_approval": "never", **fields}


def test_mcp_call_runs_the_tool_on_the_server_and_the_model_answers(gateway, client):
    response = client.responses.create(model="adder", input="What is 2 + 3?", tools=[mcp()])
    assert response.status == "completed"
    kinds = [item.type for item in response.output]
    assert kinds == ["mcp_list_tools", "message", "mcp_call", "message"]
    listed, said, made, answer = response.output
    assert listed.server_label == "tools"
    assert {t.name for t in listed.tools} == {"add", "shout", "boom", "hang", "die", "grow"}
    add = next(t for t in listed.tools if t.name == "add")
    assert add.input_schema["properties"].keys() == {"a", "b"}
    assert said.content[0].text.strip() == "Checking."
    assert (made.server_label, made.name, made.status, made.error) == (
        "tools",
        "add",
        "completed",
        None,
    )
    assert made.arguments == '{"a": 2, "b": 3}'
    assert made.output == "5"  # computed by the MCP server, not by the script
    assert response.output_text.endswith("The sum is 5.")
    assert response.tools[0].type == "mcp" and response.tools[0].server_label == "tools"
    # Usage covers both generations: the second prompt holds the first answer and the result.
    assert response.usage.input_tokens > 2 * len("What is 2 + 3?")
    (event,) = gateway.events("tool_called", server="tools", tool="add")
    assert event["bytes"] == 1 and event["error"] is None and event["duration_s"] >= 0
    assert event["key_label"] == "full"
    assert "arguments" not in event and "output" not in event
    assert gateway.events("mcp_server_started", server="tools")[0]["transport"] == "stdio"
    # The request's Activity row (the ops page) counts its calls (written from a thread:
    # a moment after the answer).
    row, deadline = {}, time.monotonic() + 10
    while "tool_calls" not in row.get("detail", {}) and time.monotonic() < deadline:
        rows = httpx.get(
            f"{gateway.url}/ui/api/activity", headers={"Authorization": "Bearer admin-secret"}
        ).json()["rows"]
        row = next((r for r in rows if r["request_id"] == event["request_id"]), {})
        time.sleep(0.1)
    assert (row["detail"]["tool_calls"], row["detail"]["tools"]) == (1, "tools.add")


def test_the_stream_has_openais_mcp_events_in_order(client):
    stream = client.responses.create(
        model="adder", input="2 + 3?", tools=[mcp(allowed_tools=["add"])], stream=True
    )
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[2:6] == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
    ]
    call_at = kinds.index("response.mcp_call.in_progress")
    assert kinds[call_at - 1 : call_at + 5] == [
        "response.output_item.added",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
        "response.output_item.done",
    ]
    assert kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    (listed,) = [i for i in final.output if i.type == "mcp_list_tools"]
    assert [t.name for t in listed.tools] == ["add"]  # the request's allowed_tools
    (made,) = [i for i in final.output if i.type == "mcp_call"]
    assert made.output == "5"
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.type for i in done] == [i.type for i in final.output]


def test_a_streamable_http_server_serves_the_same_loop(gateway, client):
    response = client.responses.create(model="remote-adder", input="2+3", tools=[mcp("remote")])
    listed, made, _ = response.output
    # The server's own allowed_tools (config) leave two of its six tools.
    assert sorted(t.name for t in listed.tools) == ["add", "shout"]
    assert (made.type, made.server_label, made.output) == ("mcp_call", "remote", "5")
    assert response.output_text == "Five."
    started = gateway.events("mcp_server_started", server="remote")
    assert started and started[0]["transport"] == "streamable_http"


def test_a_result_past_max_result_bytes_is_cut_and_says_so(gateway, client):
    response = client.responses.create(model="shouter", input="shout", tools=[mcp("remote")])
    made = next(i for i in response.output if i.type == "mcp_call")
    assert made.output.startswith("A RESULT LONGER ")  # its first 16 bytes
    assert made.output.endswith("[result cut at 16B of 34 bytes]")
    (event,) = gateway.events("tool_called", tool="shout")
    assert event["truncated"] is True and event["bytes"] == len(made.output.encode())


def test_a_streamed_call_that_times_out_ends_in_mcp_call_failed(client):
    events = list(client.responses.create(model="hanging", input="go", tools=[mcp()], stream=True))
    kinds = [e.type for e in events]
    assert "response.mcp_call.failed" in kinds and kinds[-1] == "response.completed"
    made = next(i for i in events[-1].response.output if i.type == "mcp_call")
    assert made.status == "failed" and "no answer within 3s" in made.error.message


def test_a_tool_error_goes_back_to_the_model_not_a_500(gateway, client):
    response = client.responses.create(model="failing", input="go", tools=[mcp()])
    assert response.status == "completed"
    made = next(i for i in response.output if i.type == "mcp_call")
    assert made.status == "failed" and made.output is None
    assert made.error.type == "mcp_tool_execution_error"
    assert "boom: no luck" in made.error.content[0]["text"]
    assert response.output_text == "The tool failed."
    (event,) = gateway.events("tool_called", tool="boom")
    assert "boom: no luck" in event["error"]


def test_a_tool_that_hangs_is_cut_at_the_servers_timeout(gateway, client):
    began = time.monotonic()
    response = client.responses.create(model="hanging", input="go", tools=[mcp()])
    assert time.monotonic() - began < 20
    made = next(i for i in response.output if i.type == "mcp_call")
    assert made.status == "failed" and made.error.type == "mcp_protocol_error"
    assert "no answer within 3s" in made.error.message
    assert response.output_text == "It took too long."
    event = gateway.events("tool_called", tool="hang")[-1]
    assert 2.5 < event["duration_s"] < 15


def test_a_server_that_dies_mid_call_fails_the_call_and_starts_again(gateway, client):
    response = client.responses.create(model="dying", input="go", tools=[mcp("fragile")])
    made = next(i for i in response.output if i.type == "mcp_call")
    assert made.status == "failed" and made.error.type == "mcp_protocol_error"
    assert response.output_text == "The server died."
    failed = gateway.wait_event("mcp_server_failed", server="fragile")
    assert failed["retry_in_s"] == 1.0
    # The next request starts it again, after the back-off's first wait.
    again = client.responses.create(model="dying", input="go", tools=[mcp("fragile")])
    made = next(i for i in again.output if i.type == "mcp_call")
    assert (made.status, made.output) == ("completed", "5")
    assert len(gateway.events("mcp_server_started", server="fragile")) == 2


def test_max_tool_calls_bounds_the_loop(gateway, client):
    response = client.responses.create(
        model="looping", input="go", tools=[mcp(allowed_tools=["add"])], max_tool_calls=2
    )
    calls = [i for i in response.output if i.type == "mcp_call"]
    assert len(calls) == 2 and all(c.output == "5" for c in calls)
    # Asked again with no tools, the model's call is only text.
    assert response.output[-1].type == "message"
    assert response.status == "completed"


def test_a_call_waits_for_the_clients_approval_and_runs_once_approved(gateway, client):
    tools = [
        {"type": "mcp", "server_label": "tools", "allowed_tools": ["add"]}
    ]  # approval: OpenAI's default
    first = client.responses.create(model="approver", input="2+3?", tools=tools)
    assert [i.type for i in first.output] == ["mcp_list_tools", "mcp_approval_request"]
    asked = first.output[1]
    assert (asked.server_label, asked.name, asked.arguments) == ("tools", "add", '{"a": 2, "b": 3}')
    assert first.status == "completed"
    before = len(gateway.events("tool_called", tool="add"))
    answer = {"type": "mcp_approval_response", "approval_request_id": asked.id, "approve": True}
    second = client.responses.create(
        model="approver", previous_response_id=first.id, input=[answer], tools=tools
    )
    assert [i.type for i in second.output] == ["mcp_list_tools", "mcp_call", "message"]
    made = second.output[1]
    assert (made.approval_request_id, made.output, made.status) == (asked.id, "5", "completed")
    assert second.output_text == "Approved: 5."
    assert len(gateway.events("tool_called", tool="add")) == before + 1
    # A denied call is not made; the model hears it was not approved.
    third = client.responses.create(model="approver", input="again", tools=tools)
    denied = {
        "type": "mcp_approval_response",
        "approval_request_id": third.output[1].id,
        "approve": False,
    }
    fourth = client.responses.create(
        model="approver", previous_response_id=third.id, input=[denied], tools=tools
    )
    assert [i.type for i in fourth.output] == ["mcp_list_tools", "message"]
    assert len(gateway.events("tool_called", tool="add")) == before + 1


def test_an_approval_answering_nothing_is_a_400(client):
    answer = {"type": "mcp_approval_response", "approval_request_id": "mcpr_nope", "approve": True}
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="adder", input=[answer], tools=[mcp()])
    assert "'mcpr_nope' answers no mcp_approval_request" in info.value.message


def test_concurrent_requests_share_one_server_session(gateway, client):
    from concurrent.futures import ThreadPoolExecutor

    def one(_):
        return client.responses.create(
            model="looping", input="go", tools=[mcp(allowed_tools=["add"])], max_tool_calls=1
        )

    starts = len(gateway.events("mcp_server_started", server="tools"))
    with ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(one, range(4)))
    for response in responses:
        (made,) = [i for i in response.output if i.type == "mcp_call"]
        assert (made.status, made.output) == ("completed", "5")
    assert len(gateway.events("mcp_server_started", server="tools")) == max(starts, 1)


def test_a_server_that_never_starts_is_a_424_naming_it(client):
    began = time.monotonic()
    with pytest.raises(openai.APIStatusError) as info:
        client.responses.create(model="adder", input="go", tools=[mcp("never-starts")])
    assert info.value.status_code == 424
    assert (
        "'never-starts'" in info.value.message and "did not start within 2s" in info.value.message
    )
    assert time.monotonic() - began < 15


def test_a_key_not_allowed_the_server_is_refused(gateway):
    limited = gateway.openai("limited-key")
    with pytest.raises(openai.PermissionDeniedError) as info:
        limited.responses.create(model="adder", input="go", tools=[mcp("tools")])
    assert "may not use MCP server 'tools'" in info.value.message


@pytest.mark.parametrize(
    ("tool", "named"),
    [
        (mcp(server_url="http://169.254.169.254/mcp"), "$.tools[0].server_url"),
        (
            {"type": "mcp", "server_label": "nowhere", "server_url": "http://evil.example/mcp"},
            "$.tools[0].server_label",
        ),
        (mcp(headers={"Authorization": "Bearer x"}), "$.tools[0].headers"),
        (mcp(authorization="token"), "$.tools[0].authorization"),
        (mcp(connector_id="connector_gmail"), "$.tools[0].connector_id"),
        (mcp(defer_loading=True), "$.tools[0].defer_loading"),
        (mcp(allowed_callers=["programmatic"]), "$.tools[0].allowed_callers"),
        ({"type": "mcp", "server_label": "tools", "name": "x"}, "$.tools[0].name"),
        (mcp(require_approval="sometimes"), "require_approval"),
    ],
)
def test_what_the_gateway_does_not_honour_is_a_400_naming_it(client, tool, named):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="adder", input="go", tools=[tool])
    assert named in info.value.message


def test_max_tool_calls_without_an_mcp_tool_is_still_refused(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="adder", input="go", max_tool_calls=2)
    assert "max_tool_calls" in info.value.message


def test_a_tool_list_change_is_heard_and_the_list_read_again(gateway, client):
    def growing_tools() -> set[str]:
        listed = httpx.get(
            f"{gateway.url}/v1/mcp/tools", headers={"Authorization": "Bearer full-key"}, timeout=60
        )
        return {t["name"] for t in listed.json()["data"] if t["server"] == "growing"}

    assert "extra" not in growing_tools()
    response = client.responses.create(model="grower", input="grow", tools=[mcp("growing")])
    assert next(i for i in response.output if i.type == "mcp_call").output == "grown"
    # The server said notifications/tools/list_changed during the call: the cache is gone.
    assert "extra" in growing_tools()


def test_the_servers_and_tools_routes_show_what_the_key_may_use(gateway):
    def get(path: str, key: str) -> httpx.Response:
        return httpx.get(
            f"{gateway.url}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=30
        )

    everything = get("/v1/mcp/servers", "admin-secret").json()["data"]
    assert {s["name"] for s in everything} == {
        "tools",
        "fragile",
        "remote",
        "growing",
        "never-starts",
    }
    assert "command" not in everything[0] and "headers" not in everything[0]
    limited = get("/v1/mcp/servers", "limited-key").json()["data"]
    assert [(s["name"], s["transport"]) for s in limited] == [("remote", "streamable_http")]
    tools = get("/v1/mcp/tools", "limited-key").json()
    assert sorted(t["name"] for t in tools["data"]) == ["add", "shout"]
    assert {t["server"] for t in tools["data"]} == {"remote"} and tools["errors"] == []
    assert get("/v1/mcp/tools", "wrong-key").status_code == 401


def test_a_reload_stops_a_removed_server(gateway):
    import os
    import signal

    headers = {"Authorization": "Bearer admin-secret"}
    httpx.get(f"{gateway.url}/v1/mcp/tools", headers=headers, timeout=60)  # starts every server
    config = gateway.log.parent / "models.yaml"
    text = config.read_text()
    kept = [line for line in text.splitlines() if "name: growing" not in line]
    config.write_text("\n".join(kept) + "\n")
    os.kill(gateway.process.pid, signal.SIGHUP)
    stopped = gateway.wait_event("mcp_server_stopped", server="growing", timeout=30)
    assert stopped["reason"] == "removed"
    servers = httpx.get(f"{gateway.url}/v1/mcp/servers", headers=headers).json()["data"]
    assert "growing" not in {s["name"] for s in servers}
