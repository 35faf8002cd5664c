"""The wire mapping of engine upstream on the chunk shapes real servers send: tool calls in
fragments (vLLM, llama.cpp), `reasoning_content` (vLLM) and `reasoning` (mlx-lm, Ollama),
a usage-only last chunk, an error object mid-stream; and the body a canonical request
becomes."""

from __future__ import annotations

import pytest

from engines.errors import UpstreamError
from engines.upstream.replicas import Replica, replica_name
from engines.upstream.wire import StreamDecoder, request_body
from schemas.canonical import (
    ChatRequest,
    Message,
    ReasoningDelta,
    Sampling,
    TextDelta,
    ToolCall,
    ToolCallOutput,
    ToolSpec,
)


def delta(**fields) -> dict:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": None}]}


def test_tool_call_fragments_become_one_call_when_the_choice_finishes():
    decoder = StreamDecoder(show_reasoning=True)
    chunks = [
        delta(role="assistant", content=None),
        delta(tool_calls=[{"index": 0, "id": "call_1", "function": {"name": "get_weather"}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '{"city": '}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '"Paris"}'}}]),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 12}},
    ]
    outputs = [o for chunk in chunks for o in decoder.feed(chunk)]
    assert outputs == [
        ToolCallOutput(ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}'))
    ]
    finished = decoder.finished(0.1, 0.2, "http://a:1/v1")
    assert finished.stop_reason == "tool_calls"  # the server said "stop" after a call
    assert (finished.prompt_tokens, finished.new_tokens) == (30, 12)
    assert finished.replica == "http://a:1/v1"


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_in_either_field_is_shown_only_when_asked(field):
    shown = StreamDecoder(show_reasoning=True).feed(delta(**{field: "hmm"}, content="42"))
    assert shown == [ReasoningDelta("hmm"), TextDelta("42")]
    hidden = StreamDecoder(show_reasoning=False).feed(delta(**{field: "hmm"}, content="42"))
    assert hidden == [TextDelta("42")]


def test_an_error_object_mid_stream_raises():
    with pytest.raises(UpstreamError, match="out of memory"):
        StreamDecoder(show_reasoning=False).feed({"error": {"message": "out of memory"}})


def test_a_completions_chunk_carries_its_text_on_the_choice():
    chunk = {"choices": [{"index": 0, "text": "Paris", "finish_reason": "length"}]}
    decoder = StreamDecoder(show_reasoning=False)
    assert decoder.feed(chunk) == [TextDelta("Paris")]
    assert decoder.finished(0, 0, "r").stop_reason == "length"


def test_the_body_carries_every_field_of_the_request():
    request = ChatRequest(
        messages=[
            Message(role="developer", content="be brief"),
            Message(role="assistant", tool_calls=[ToolCall(id="c1", name="f", arguments="{}")]),
            Message(role="tool", content="sunny", tool_call_id="c1", name="f"),
        ],
        max_tokens=64,
        sampling=Sampling(temperature=0.2, top_p=0.9, top_k=40, min_p=0.05, seed=7),
        stop=["END"],
        tools=[ToolSpec(name="f", description="d", parameters={"type": "object"})],
        reasoning="high",
    )
    path, body = request_body(request, "served-name")
    assert path == "/chat/completions"
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["messages"][1]["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
    assert body["messages"][2]["tool_call_id"] == "c1"
    assert body["tools"][0]["function"]["name"] == "f"
    expected = {
        "model": "served-name",
        "max_tokens": 64,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "min_p": 0.05,
        "seed": 7,
        "stop": ["END"],
        "reasoning_effort": "high",
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert {k: body[k] for k in expected} == expected
    raw, body = request_body(ChatRequest(messages=[], max_tokens=5, raw_prompt="Once"), None)
    assert raw == "/completions" and body["prompt"] == "Once" and "model" not in body
    assert "top_k" not in body and "seed" not in body and "reasoning_effort" not in body


def test_replicas_are_named_without_credentials():
    assert replica_name("http://user:secret@10.0.0.5:8000/v1/") == "http://10.0.0.5:8000/v1"
    bare = Replica("http://10.0.0.5:8000")
    assert (bare.base, bare.origin) == ("http://10.0.0.5:8000/v1", "http://10.0.0.5:8000")


def test_penalties_and_bias_go_upstream_as_openai_and_vllm_fields():
    request = ChatRequest(
        messages=[Message(role="user", content="hi")],
        max_tokens=8,
        sampling=Sampling(
            repeat_penalty=1.2, presence_penalty=0.5, frequency_penalty=0.25, logit_bias={7: -5.0}
        ),
    )
    _, body = request_body(request, "m", stream=False)
    assert body["repetition_penalty"] == 1.2
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, 0.25)
    assert body["logit_bias"] == {"7": -5.0}
    _, plain = request_body(ChatRequest(messages=request.messages, max_tokens=8), "m")
    assert not {"repetition_penalty", "presence_penalty", "logit_bias"} & plain.keys()
