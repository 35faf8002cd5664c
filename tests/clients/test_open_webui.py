"""Open WebUI's chat as its page sends it: streamed, with its 36 built-in tool definitions
(~25k tokens) that alone overflow the shipped SmolLM2's 8,192 tokens. The shipped
`context.tools_overflow: drop_unused` keeps the tools that fit, and the header and the
`tools_dropped` event name the rest: counted on the shipped SmolLM2 itself (its template
and tokenizer, through Anthropic's count_tokens, which fits the tools as a chat would), and
chatted through the openai SDK with a scripted model of the same window and policy. (The
real model's answer after a prefill of ~8k tokens takes minutes on a loaded 2-core CPU: it
timed out at 10 min here, so CI does not run it.)

The tools (tests/clients/open_webui_tools.py) are named as Open WebUI 0.12's
`backend/open_webui/tools/builtin.py` names them, sized as its page sends them. Open WebUI's
own server and page are tested in tests/clients/test_open_webui_page.py (the set its page sends
there, with no web search, image or knowledge features configured, differs in names: memory,
notes, automations and calendar tools; 36 too, ~24.9k tokens)."""

from __future__ import annotations

import pytest
from conftest import serving
from open_webui_tools import BUILTIN, open_webui_tools

CONFIG = """
models:
  - id: webui
    engine: scripted
    context: {max: 8192, tools_overflow: drop_unused}
    script: {reply: "The capital of France is Paris."}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("open-webui"), CONFIG) as process:
        yield process


def test_open_webuis_chat_with_its_built_in_tools_is_answered(gateway):
    client = gateway.openai()
    raw = client.chat.completions.with_raw_response.create(
        model="webui",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        tools=open_webui_tools(),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(raw.parse())
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "The capital of France is Paris."
    dropped = raw.headers["x-gateway-dropped-tools"].split(",")
    event = gateway.wait_event("tools_dropped", request_id=raw.headers["x-request-id"])
    assert event["dropped"] == dropped and event["kept"] + len(dropped) == 36
    assert dropped == BUILTIN[event["kept"] :]  # the first declared stay
    assert event["prompt_tokens"] > 2 * event["window"] == 2 * 8192
    usage = chunks[-1].usage
    assert usage.prompt_tokens + usage.completion_tokens <= 8192


def test_a_tool_open_webui_already_called_stays(gateway):
    client = gateway.openai()
    called = {"id": "call_1", "type": "function"}
    called["function"] = {"name": "list_tasks", "arguments": '{"query": "all"}'}
    raw = client.chat.completions.with_raw_response.create(
        model="webui",
        messages=[
            {"role": "user", "content": "Which tasks are running?"},
            {"role": "assistant", "content": None, "tool_calls": [called]},
            {"role": "tool", "tool_call_id": "call_1", "content": "[]"},
            {"role": "user", "content": "And the capital of France?"},
        ],
        tools=open_webui_tools(),
    )
    assert raw.parse().choices[0].message.content == "The capital of France is Paris."
    dropped = raw.headers["x-gateway-dropped-tools"].split(",")
    assert "list_tasks" not in dropped and "stop_task" in dropped  # the last but one goes


def test_the_shipped_smollm2_fits_open_webuis_tools_in_its_window(shipped_gateway):
    tools = [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in open_webui_tools()
    ]
    client = shipped_gateway.anthropic()
    counted = client.messages.count_tokens(
        model="smollm2",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        tools=tools,
    )
    event = shipped_gateway.wait_event("tools_dropped", model="smollm2")
    assert event["window"] == 8192 and event["prompt_tokens"] > 2 * 8192
    assert 0 < event["kept"] < 36 and event["dropped"] == BUILTIN[event["kept"] :]
    assert counted.input_tokens + 64 <= 8192  # the prompt the chat runs with, room kept
