"""The Anthropic Messages protocol on a real gateway process with scripted models, via `anthropic`."""

from __future__ import annotations

import json
import threading

import anthropic
import httpx
import msgspec
import pytest
from conftest import serving

from engines.errors import ModelUnavailable
from gateway.anthropic.messages import to_messages
from gateway.anthropic.models import model_page
from gateway.anthropic.stream import Framer, error_event, stream_events
from gateway.control.registry import Generation
from gateway.http.streaming import stream_body
from schemas import anthropic as wire
from schemas.canonical import Finished, TextDelta
from schemas.config import GatewayConfig

REPLY = "hello from echo, café 😀 done"
CONFIG = f"""
models:
  - id: echo
    engine: scripted
    aliases: [e]
    script: {{reply: "{REPLY}"}}
  - id: caller
    engine: scripted
    script:
      reply: 'Checking. <tool_call>{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}</tool_call>'
  - id: slow
    engine: scripted
    script: {{reply: "one two three four five six seven eight nine ten", token_delay: 0.1}}
    queue: {{max_depth: 1, max_wait: 30s}}
"""

HELLO = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather in a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("anthropic"), CONFIG) as process:
        yield process


def raw_events(gateway, body: dict) -> list[tuple[str, dict]]:
    """The SSE stream as (event name, data) pairs, read line by line."""
    events, name = [], None
    with httpx.stream("POST", f"{gateway.url}/v1/messages", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event:"):
                name = line.removeprefix("event:").strip()
            elif line.startswith("data:"):
                events.append((name, json.loads(line.removeprefix("data:"))))
    return events


def test_plain_message_and_usage_equal_the_generated_event(gateway, anthropic_client):
    raw = anthropic_client.messages.with_raw_response.create(
        model="echo", max_tokens=100, messages=HELLO
    )
    message = raw.parse()
    assert message.id.startswith("msg_") and message.type == "message"
    assert message.role == "assistant" and message.model == "echo"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == REPLY
    assert (message.stop_reason, message.stop_sequence) == ("end_turn", None)
    generated = gateway.wait_event("generated", request_id=raw.headers["x-request-id"])
    assert message.usage.input_tokens == generated["prompt_tokens"]
    assert message.usage.output_tokens == generated["new_tokens"]
    routed = gateway.wait_event("request_routed", request_id=raw.headers["x-request-id"])
    assert routed["protocol"] == "anthropic"


def test_raw_stream_is_anthropics_event_sequence(gateway, anthropic_client):
    plain = anthropic_client.messages.create(model="echo", max_tokens=100, messages=HELLO)
    events = raw_events(
        gateway, {"model": "e", "max_tokens": 100, "messages": HELLO, "stream": True}
    )
    names = [name for name, _ in events]
    deltas = names.count("content_block_delta")
    assert deltas >= 2
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    start = events[0][1]["message"]
    assert start["id"].startswith("msg_") and start["type"] == "message"
    assert (start["role"], start["model"], start["content"]) == ("assistant", "echo", [])
    assert start["stop_reason"] is None and start["stop_sequence"] is None
    assert start["usage"]["input_tokens"] == plain.usage.input_tokens
    assert events[1][1] == {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    text = ""
    for _, data in events[3 : 3 + deltas]:
        assert data["index"] == 0 and data["delta"]["type"] == "text_delta"
        text += data["delta"]["text"]
    assert text == REPLY
    assert events[-3][1] == {"type": "content_block_stop", "index": 0}
    message_delta = events[-2][1]
    assert message_delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert message_delta["usage"]["output_tokens"] == plain.usage.output_tokens


def test_sdk_stream_text_and_usage_equal_the_plain_answer(anthropic_client):
    plain = anthropic_client.messages.create(model="echo", max_tokens=100, messages=HELLO)
    with anthropic_client.messages.stream(model="echo", max_tokens=100, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == plain.content[0].text == final.content[0].text
    assert final.usage.input_tokens == plain.usage.input_tokens
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert final.stop_reason == "end_turn"


def count(anthropic_client, **body) -> int:
    return anthropic_client.messages.count_tokens(
        model=body.pop("model", "echo"), **body
    ).input_tokens


def test_system_as_string_and_as_blocks(anthropic_client):
    blocks = [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}]
    for system in ["Be brief.\n\nBe kind.", blocks]:
        reply = anthropic_client.messages.create(
            model="echo", max_tokens=50, system=system, messages=HELLO
        )
        assert reply.content[0].text == REPLY
    with_string = count(anthropic_client, system="Be brief.\n\nBe kind.", messages=HELLO)
    assert count(anthropic_client, system=blocks, messages=HELLO) == with_string
    assert with_string > count(anthropic_client, messages=HELLO)


def test_system_turns_inside_messages_are_served_and_counted(anthropic_client):
    # Claude Code sends these for any model outside its own list (its first request).
    turns = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": "and now?"},
    ]
    reply = anthropic_client.messages.create(model="claude-echo", max_tokens=50, messages=turns)
    assert reply.content[0].text == REPLY
    without = [turn for turn in turns if turn["role"] != "system"]
    assert count(anthropic_client, messages=turns) > count(anthropic_client, messages=without)
    streamed = anthropic_client.messages.create(
        model="echo", max_tokens=50, messages=turns, stream=True
    )
    assert [e.type for e in streamed][-1] == "message_stop"


def test_a_system_turn_holding_an_image_is_refused_by_name(gateway):
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    body = {
        "model": "echo",
        "max_tokens": 5,
        "messages": [{"role": "system", "content": [image]}, *HELLO],
    }
    response = httpx.post(f"{gateway.url}/v1/messages", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "system messages may only contain text blocks"


def test_stop_sequences_cut_the_text_and_name_the_match(anthropic_client):
    plain = anthropic_client.messages.create(
        model="echo", max_tokens=100, messages=HELLO, stop_sequences=["café"]
    )
    assert plain.content[0].text == "hello from echo, "
    assert (plain.stop_reason, plain.stop_sequence) == ("stop_sequence", "café")
    with anthropic_client.messages.stream(
        model="echo", max_tokens=100, messages=HELLO, stop_sequences=["café"]
    ) as stream:
        assert "".join(stream.text_stream) == "hello from echo, "
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "café")


def test_max_tokens_stops_with_max_tokens(anthropic_client):
    reply = anthropic_client.messages.create(model="echo", max_tokens=10, messages=HELLO)
    assert reply.stop_reason == "max_tokens"
    assert 0 < reply.usage.output_tokens <= 10
    assert REPLY.startswith(reply.content[0].text)


def test_count_tokens_grows_with_the_prompt_and_equals_the_generated_count(
    gateway, anthropic_client
):
    short = count(anthropic_client, messages=HELLO)
    longer = count(
        anthropic_client, messages=[{"role": "user", "content": "hi there, how are you?"}]
    )
    assert 0 < short < longer
    assert count(anthropic_client, messages=HELLO, tools=TOOLS) > short
    raw = anthropic_client.messages.with_raw_response.create(
        model="echo", max_tokens=100, messages=HELLO, tools=TOOLS, system="Be brief."
    )
    generated = gateway.wait_event("generated", request_id=raw.headers["x-request-id"])
    counted = count(anthropic_client, messages=HELLO, tools=TOOLS, system="Be brief.")
    assert counted == generated["prompt_tokens"] == raw.parse().usage.input_tokens


def test_tool_call_comes_back_as_a_tool_use_block(anthropic_client):
    reply = anthropic_client.messages.create(
        model="caller", max_tokens=200, messages=HELLO, tools=TOOLS
    )
    assert reply.stop_reason == "tool_use"
    text, call = reply.content
    assert (text.type, text.text) == ("text", "Checking. ")
    assert (call.type, call.name, call.input) == ("tool_use", "get_weather", {"city": "Paris"})
    assert call.id
    with anthropic_client.messages.stream(
        model="caller", max_tokens=200, messages=HELLO, tools=TOOLS
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"city": "Paris"}


def test_streamed_tool_use_block_carries_input_json_delta(gateway):
    body = {"model": "caller", "max_tokens": 200, "messages": HELLO, "tools": TOOLS, "stream": True}
    events = raw_events(gateway, body)
    blocks = [data for name, data in events if name == "content_block_start"]
    assert [b["content_block"]["type"] for b in blocks] == ["text", "tool_use"]
    assert blocks[1]["index"] == 1 and blocks[1]["content_block"]["input"] == {}
    json_deltas = [
        data["delta"]["partial_json"]
        for name, data in events
        if name == "content_block_delta" and data["delta"]["type"] == "input_json_delta"
    ]
    assert json.loads("".join(json_deltas)) == {"city": "Paris"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_a_follow_up_with_tool_use_and_tool_result_is_accepted(anthropic_client):
    first = anthropic_client.messages.create(
        model="caller", max_tokens=200, messages=HELLO, tools=TOOLS
    )
    call = first.content[1]
    follow_up = [
        *HELLO,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": "18°C and sunny"},
                {"type": "text", "text": "Thanks!"},
            ],
        },
    ]
    reply = anthropic_client.messages.create(
        model="echo", max_tokens=100, messages=follow_up, tools=TOOLS
    )
    assert reply.content[0].text == REPLY
    assert count(anthropic_client, messages=follow_up, tools=TOOLS) > count(
        anthropic_client, messages=HELLO, tools=TOOLS
    )


def test_claude_prefixed_names_route_to_the_model(gateway, anthropic_client):
    for name in ["claude-echo", "claude-e"]:
        raw = anthropic_client.messages.with_raw_response.create(
            model=name, max_tokens=50, messages=HELLO
        )
        assert raw.parse().model == "echo"
        routed = gateway.wait_event("request_routed", request_id=raw.headers["x-request-id"])
        assert (routed["requested"], routed["served"], routed["alias"]) == (name, "echo", name)
    assert count(anthropic_client, model="claude-echo", messages=HELLO) == count(
        anthropic_client, messages=HELLO
    )
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client.messages.create(model="claude-nope", max_tokens=50, messages=HELLO)


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"model": "echo", "messages": HELLO}, "max_tokens"),
        (
            {"model": "echo", "max_tokens": 10, "messages": HELLO, "temperature": 1.5},
            "$.temperature",
        ),
        ({"model": "echo", "max_tokens": 0, "messages": HELLO}, "$.max_tokens"),
        ({"model": "echo", "max_tokens": 10, "messages": []}, "$.messages"),
        (
            {
                "model": "echo",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
            },
            "Could not process image: $.messages[0].content[0].source: image sources must be base64",
        ),
        (  # Claude Code's Read tool returns images as tool results; the wording lets it recover
            {
                "model": "echo",
                "max_tokens": 10,
                "messages": [
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t1",
                                "content": [{"type": "image", "source": {}}],
                            }
                        ],
                    },
                ],
            },
            "Could not process image",
        ),
        (
            {
                "model": "echo",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}],
            },
            "does not support PDF input",
        ),
    ],
)
def test_bad_requests_are_400s_in_anthropics_envelope(gateway, anthropic_client, body, fragment):
    response = httpx.post(f"{gateway.url}/v1/messages", json=body)
    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert fragment in response.json()["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as raised:
        anthropic_client.post("/v1/messages", body=body, cast_to=httpx.Response)
    assert raised.value.body["error"]["type"] == "invalid_request_error"


def test_unknown_model_is_a_404_naming_the_known_ones(anthropic_client):
    with pytest.raises(anthropic.NotFoundError) as missing:
        anthropic_client.messages.create(model="gpt-5", max_tokens=10, messages=HELLO)
    error = missing.value.body
    assert error["type"] == "error" and error["error"]["type"] == "not_found_error"
    assert "gpt-5" in error["error"]["message"] and "echo" in error["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client.messages.count_tokens(model="gpt-5", messages=HELLO)


def test_full_queue_is_a_429_rate_limit_error(gateway, anthropic_client):
    def stream_slow():
        with anthropic_client.messages.stream(
            model="slow", max_tokens=100, messages=HELLO
        ) as stream:
            stream.until_done()

    streams = [threading.Thread(target=stream_slow) for _ in range(2)]
    streams[0].start()
    wait_health(gateway, "slow", lambda m: m["running"] == 1)
    streams[1].start()  # waits in the queue: depth 1 of max_depth 1
    wait_health(gateway, "slow", lambda m: m["queue_depth"] == 1)
    with pytest.raises(anthropic.RateLimitError) as refused:
        anthropic_client.messages.create(model="slow", max_tokens=100, messages=HELLO)
    assert refused.value.body["error"]["type"] == "rate_limit_error"
    assert int(refused.value.response.headers["retry-after"]) >= 1
    for thread in streams:
        thread.join()


def wait_health(gateway, model, condition, timeout=10):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition(httpx.get(f"{gateway.url}/health").json()["models"][model]):
            return
        time.sleep(0.02)
    raise TimeoutError(f"{model} never reached the expected state")


# The pure pieces, without a process.


def test_tool_results_keep_the_clients_order_and_the_tools_name():
    request = wire.CountTokensRequest(
        model="m",
        system=[wire.TextBlock(text="a"), wire.TextBlock(text="b")],
        messages=[
            wire.InputMessage(
                role="assistant",
                content=[
                    wire.ThinkingBlock(thinking="hidden"),
                    wire.ToolUseBlock(id="t1", name="get_weather", input={"city": "Paris"}),
                ],
            ),
            wire.InputMessage(
                role="user",
                content=[
                    wire.TextBlock(text="before"),
                    wire.ToolResultBlock(tool_use_id="t1", content="boom", is_error=True),
                ],
            ),
        ],
    )
    system, assistant, user, tool = to_messages(request)
    assert (system.role, system.content) == ("system", "a\n\nb")
    assert assistant.content == "" and assistant.tool_calls[0].name == "get_weather"
    assert json.loads(assistant.tool_calls[0].arguments) == {"city": "Paris"}
    assert (user.role, user.content) == ("user", "before")
    assert (tool.role, tool.tool_call_id, tool.name) == ("tool", "t1", "get_weather")
    assert tool.content == "Error: boom"


def test_an_empty_answer_is_still_one_text_block():
    finished = Finished(stop_reason="stop", prompt_tokens=3, new_tokens=0, prefill_s=0, decode_s=0)
    events = Framer([]).feed(finished)
    assert [type(e).__name__ for e in events] == [
        "ContentBlockStart",
        "Ping",
        "ContentBlockStop",
        "MessageDelta",
        "MessageStop",
    ]


async def test_a_failure_after_the_first_event_ends_the_stream_with_an_error_event():
    class Request:
        scope: dict = {}

    async def results():
        yield TextDelta("never")  # not reached: the first output is passed in
        raise ModelUnavailable("model 'm' was unloaded")

    outputs = results()
    await anext(outputs)
    start = wire.Message(
        id="msg_1", model="m", content=[], usage=wire.Usage(input_tokens=1, output_tokens=0)
    )
    frames = stream_events(start, TextDelta("hi"), outputs, [])
    body = stream_body(Request(), frames, error_event, outputs.aclose)
    events = [e async for e in body]
    assert [e.event for e in events] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "error",
    ]
    assert json.loads(events[-1].data) == {
        "type": "error",
        "error": {"type": "api_error", "message": "model 'm' was unloaded"},
    }


def test_the_anthropic_model_list_offers_claude_names_for_chat_models():
    config = msgspec.convert(
        {
            "models": [
                {"id": "echo", "engine": "scripted", "aliases": ["e", "claude-x"]},
                {"id": "minilm", "engine": "scripted", "task": "embed"},
            ]
        },
        GatewayConfig,
    )
    page = msgspec.to_builtins(model_page(Generation(config, {})))
    assert [m["id"] for m in page["data"]] == ["echo", "claude-echo", "e", "claude-e", "claude-x"]
    assert page["data"][1] == {
        "type": "model",
        "id": "claude-echo",
        "display_name": "echo",
        "created_at": "1970-01-01T00:00:00Z",
    }
    assert (page["has_more"], page["first_id"], page["last_id"]) == (False, "echo", "claude-x")


def test_claude_code_model_discovery_lists_claude_names(gateway):
    anthropic_client = gateway.anthropic()
    ids = [m.id for m in anthropic_client.models.list()]
    assert "echo" in ids and "claude-echo" in ids
    reply = anthropic_client.messages.create(
        model="claude-echo", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.model == "echo"


def test_system_turns_join_the_system_prompt_in_order():
    request = wire.CountTokensRequest(
        model="m",
        system="first",
        messages=[
            wire.InputMessage(role="user", content="hi"),
            wire.InputMessage(role="system", content=[wire.TextBlock(text="later")]),
            wire.InputMessage(role="user", content="again"),
        ],
    )
    roles = [(m.role, m.content) for m in to_messages(request)]
    assert roles == [("system", "first\n\nlater"), ("user", "hi"), ("user", "again")]
