"""`POST /v1/responses` on a real gateway process with scripted models: the response object,
the event stream (raw SSE and through `openai`), input items, tools and what is refused."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from conftest import serving

CONFIG = """
models:
  - id: echo
    engine: scripted
    aliases: [e]
    script: {reply: "hello from echo, café 😀 done"}
  - id: caller
    engine: scripted
    script:
      reply: 'Checking. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
  - id: slow
    engine: scripted
    script: {reply: "one two three four five six seven eight nine ten", token_delay: 0.1}
"""
REPLY = "hello from echo, café 😀 done"
WORDS = ["hello", " from", " echo,", " café", " 😀", " done"]
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("responses"), CONFIG) as process:
        yield process


def sse(gateway, body: dict) -> list[tuple[str, dict]]:
    """The raw stream as (event name, data) pairs."""
    events, name = [], None
    with httpx.stream("POST", f"{gateway.url}/v1/responses", json=body, timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
                name = None
    return events


def chatml(*turns: tuple[str, str]) -> int:
    """Prompt tokens of the scripted engine (ChatML, one token per byte)."""
    text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)
    return len((text + "<|im_start|>assistant\n").encode())


def test_plain_response_object_and_usage_equal_the_generated_event(gateway, openai_client):
    raw = openai_client.responses.with_raw_response.create(model="e", input="hi")
    response = raw.parse()
    assert response.id.startswith("resp_") and response.object == "response"
    assert (response.status, response.model, response.error) == ("completed", "echo", None)
    assert response.output_text == REPLY
    (message,) = response.output
    assert (message.type, message.role, message.status) == ("message", "assistant", "completed")
    assert message.content[0].type == "output_text"
    request_id = raw.headers["x-request-id"]
    gateway.wait_event("request_finished", request_id=request_id)
    (generated,) = gateway.events("generated", request_id=request_id)
    usage = response.usage
    assert usage.input_tokens == generated["prompt_tokens"] == chatml(("user", "hi"))
    assert usage.output_tokens == generated["new_tokens"]
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 0
    routed = gateway.events("request_routed", request_id=request_id)[0]
    assert (routed["requested"], routed["alias"], routed["protocol"]) == ("e", "e", "openai")


def test_instructions_and_message_items_become_the_conversation(openai_client):
    response = openai_client.responses.create(
        model="echo",
        instructions="Be brief.",
        input=[
            {"role": "developer", "content": "No emoji."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}]},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "b", "annotations": []}],
            },
            {"role": "user", "content": "c"},
        ],
        store=True,  # accepted; nothing is kept
    )
    expected = chatml(
        ("system", "Be brief."), ("system", "No emoji."), ("user", "a"), ("assistant", "b"),
        ("user", "c"),
    )  # fmt: skip
    # Chat templates know no "developer" role: it is a system turn.
    assert response.usage.input_tokens == expected
    assert response.instructions == "Be brief."


def test_raw_event_stream_in_order_and_its_text_equals_the_plain_answer(gateway, openai_client):
    plain = openai_client.responses.create(model="echo", input="hi")
    events = sse(gateway, {"model": "echo", "input": "hi", "stream": True})
    names = [name for name, _ in events]
    assert names == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * len(WORDS),
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [data["type"] for _, data in events] == names
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    created, in_progress = events[0][1]["response"], events[1][1]["response"]
    assert created["status"] == in_progress["status"] == "in_progress"
    assert created["output"] == [] and created["id"] == events[-1][1]["response"]["id"]
    added = events[2][1]
    item_id = added["item"]["id"]
    assert added["item"]["status"] == "in_progress" and added["output_index"] == 0
    deltas = [data for name, data in events if name == "response.output_text.delta"]
    assert [d["delta"] for d in deltas] == WORDS
    assert {(d["item_id"], d["output_index"], d["content_index"]) for d in deltas} == {
        (item_id, 0, 0)
    }
    assert events[-4][1]["text"] == REPLY == plain.output_text
    assert events[-3][1]["part"]["text"] == REPLY
    assert events[-2][1]["item"]["status"] == "completed"
    final = events[-1][1]["response"]
    assert final["status"] == "completed"
    assert final["output"] == [events[-2][1]["item"]]
    assert final["usage"]["output_tokens"] == plain.usage.output_tokens


def test_sdk_stream_and_final_response(openai_client):
    plain = openai_client.responses.create(model="echo", input="hi")
    with openai_client.responses.stream(model="echo", input="hi") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == plain.output_text
    assert final.usage.model_dump() == plain.usage.model_dump()
    events = list(openai_client.responses.create(model="echo", input="hi", stream=True))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == plain.output_text


def test_max_output_tokens_makes_the_response_incomplete(gateway, openai_client):
    response = openai_client.responses.create(model="echo", input="hi", max_output_tokens=10)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "hello from"
    assert response.output[0].status == "incomplete"
    assert response.usage.output_tokens <= 10
    events = sse(gateway, {"model": "echo", "input": "hi", "max_output_tokens": 10, "stream": True})
    # As OpenAI does: a response cut short ends with `response.incomplete`.
    assert events[-1][0] == "response.incomplete"
    assert events[-1][1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    sdk_events = list(
        openai_client.responses.create(model="echo", input="hi", max_output_tokens=10, stream=True)
    )
    assert sdk_events[-1].response.status == "incomplete"


def test_a_tool_call_comes_back_as_a_function_call_item(openai_client):
    response = openai_client.responses.create(
        model="caller", input="Weather in Paris?", tools=[TOOL], parallel_tool_calls=False
    )
    message, call = response.output
    assert message.content[0].text == "Checking. "
    assert call.type == "function_call" and call.status == "completed"
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id and call.id.startswith("fc_")
    assert response.tools[0].name == "get_weather"
    assert response.parallel_tool_calls is False


def test_a_streamed_tool_call_has_its_own_output_item(gateway, openai_client):
    body = {"model": "caller", "input": "Weather?", "tools": [TOOL], "stream": True}
    events = sse(gateway, body)
    names = [name for name, _ in events]
    call_at = names.index("response.function_call_arguments.delta") - 1
    assert names[call_at:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added, delta, done, item_done = (data for _, data in events[call_at : call_at + 4])
    assert added["output_index"] == 1 and added["item"]["type"] == "function_call"
    assert added["item"]["arguments"] == ""
    assert delta["item_id"] == done["item_id"] == added["item"]["id"]
    assert json.loads(done["arguments"]) == {"city": "Paris"} and done["name"] == "get_weather"
    assert item_done["item"]["status"] == "completed"
    with openai_client.responses.stream(model="caller", input="Weather?", tools=[TOOL]) as stream:
        final = stream.get_final_response()
    assert [item.type for item in final.output] == ["message", "function_call"]


def test_function_call_round_trip_matches_the_same_chat_conversation(openai_client):
    first = openai_client.responses.create(model="caller", input="Weather in Paris?", tools=[TOOL])
    call = first.output[1]
    follow_up = openai_client.responses.create(
        model="echo",
        tools=[TOOL],
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "id": "rs_1", "summary": []},  # sent back by agents; skipped
            *[item.model_dump(exclude_none=True) for item in first.output],
            {"type": "function_call_output", "call_id": call.call_id, "output": "18°C, sunny"},
        ],
    )
    assert follow_up.status == "completed" and follow_up.output_text == REPLY
    # The same conversation through chat completions reaches the model as the same prompt.
    chat = openai_client.chat.completions.create(
        model="echo",
        tools=[{"type": "function", "function": {k: TOOL[k] for k in TOOL if k != "type"}}],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "Checking. ",
                "tool_calls": [
                    {
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.call_id, "content": "18°C, sunny"},
        ],
    )
    assert follow_up.usage.input_tokens == chat.usage.prompt_tokens


def test_tool_choice_none_hides_the_tools(openai_client):
    response = openai_client.responses.create(
        model="caller", input="Weather?", tools=[TOOL], tool_choice="none"
    )
    assert [item.type for item in response.output] == ["message"]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"conversation": "conv_1"}, "keeps no conversation objects"),
        ({"background": True, "store": False}, "$.background: a background response"),
        ({"tools": [{"type": "web_search"}]}, "'web_search' are not supported ($.tools[0].type)"),
        ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "f"}}, "'f'"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "needs its schema"),
        ({"top_logprobs": 2}, "include"),
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "image_url": "data:image/png;base64,"}],
                    }
                ]
            },
            "$.input[0].content[0].image_url: not an image",
        ),
        ({"input": [{"type": "computer_call_output"}]}, "'computer_call_output'"),
        ({"input": [{"role": "wizard", "content": "x"}]}, "$.input[0].role"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "$.input[0]"),
        ({"input": [7]}, "$.input[0]"),
        ({"input": None}, "$.input"),
        ({"temperature": "hot"}, "$.temperature"),
        ({"max_output_tokens": 0}, "$.max_output_tokens"),
    ],
)
def test_what_is_not_supported_is_refused_with_a_clear_400(gateway, body, fragment):
    payload = {"model": "echo", "input": "hi", **body}
    response = httpx.post(f"{gateway.url}/v1/responses", json=payload)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"


def test_sdk_raises_bad_request_and_not_found(openai_client):
    with pytest.raises(openai.NotFoundError, match="resp_1"):  # stored ones: test_responses_store
        openai_client.responses.create(model="echo", input="hi", previous_response_id="resp_1")
    with pytest.raises(openai.NotFoundError) as missing:
        openai_client.responses.create(model="gpt-5", input="hi")
    assert "gpt-5" in missing.value.body["message"]
    with (
        pytest.raises(openai.NotFoundError),
        openai_client.responses.stream(model="gpt-5", input="hi") as stream,
    ):
        list(stream)


def test_a_client_leaving_mid_stream_stops_the_generation(gateway):
    body = {"model": "slow", "input": "hi", "stream": True}
    with httpx.stream("POST", f"{gateway.url}/v1/responses", json=body, timeout=30) as r:
        lines = r.iter_lines()
        while "output_text.delta" not in next(lines):
            pass
    generated = gateway.wait_event("generated", model="slow")
    assert generated["stop_reason"] == "cancelled"
    assert generated["new_tokens"] < len("one two three four five six seven eight nine ten")
