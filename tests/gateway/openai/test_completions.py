"""`POST /v1/completions` on a real gateway process with scripted models, via `openai`."""

from __future__ import annotations

import time

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
  - id: slow
    engine: scripted
    script: {reply: "one two three four five six seven eight nine ten", token_delay: 0.1}
"""
REPLY = "hello from echo, café 😀 done"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("completions"), CONFIG) as process:
        yield process


def generated_for(gateway, request_id: str) -> list[dict]:
    gateway.wait_event("request_finished", request_id=request_id)
    return gateway.events("generated", request_id=request_id)


def test_a_prompt_is_continued_as_is_and_usage_equals_the_generated_event(gateway, openai_client):
    raw = openai_client.completions.with_raw_response.create(model="echo", prompt="Once upon")
    reply = raw.parse()
    assert reply.object == "text_completion" and reply.id.startswith("cmpl-")
    assert reply.model == "echo"
    (choice,) = reply.choices
    assert (choice.index, choice.text, choice.finish_reason) == (0, REPLY, "stop")
    (generated,) = generated_for(gateway, raw.headers["x-request-id"])
    # The scripted tokenizer is one token per byte: no chat template was wrapped around it.
    assert reply.usage.prompt_tokens == generated["prompt_tokens"] == len(b"Once upon")
    assert reply.usage.completion_tokens == generated["new_tokens"]
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    routed = gateway.events("request_routed", request_id=raw.headers["x-request-id"])[0]
    assert (routed["served"], routed["protocol"], routed["stream"]) == ("echo", "openai", False)


def test_a_list_of_prompts_gives_a_choice_each_in_order_and_summed_usage(gateway, openai_client):
    prompts = ["a", "bb", "ccc"]
    raw = openai_client.completions.with_raw_response.create(model="e", prompt=prompts, echo=True)
    reply = raw.parse()
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert [c.text for c in reply.choices] == [p + REPLY for p in prompts]
    generated = generated_for(gateway, raw.headers["x-request-id"])
    assert sorted(g["prompt_tokens"] for g in generated) == [1, 2, 3]
    assert reply.usage.prompt_tokens == sum(g["prompt_tokens"] for g in generated) == 6
    assert reply.usage.completion_tokens == sum(g["new_tokens"] for g in generated)


def test_streamed_text_and_usage_match_the_plain_answer(openai_client):
    plain = openai_client.completions.create(model="echo", prompt="hi", max_tokens=12)
    chunks = list(
        openai_client.completions.create(
            model="echo",
            prompt="hi",
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "text_completion" for c in chunks)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == plain.choices[0].text == "hello from"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == []
    assert chunks[-1].usage.model_dump() == plain.usage.model_dump()


def test_streamed_list_with_echo_goes_choice_by_choice(openai_client):
    chunks = list(
        openai_client.completions.create(model="echo", prompt=["x", "y"], echo=True, stream=True)
    )
    assert chunks[-1].usage is None  # no usage chunk unless asked for
    texts = {0: "", 1: ""}
    order = []
    for chunk in chunks:
        (choice,) = chunk.choices
        texts[choice.index] += choice.text
        order.append(choice.index)
    assert texts == {0: "x" + REPLY, 1: "y" + REPLY}
    assert order == sorted(order)


def test_raw_sse_ends_with_done(gateway):
    body = {"model": "echo", "prompt": "hi", "stream": True}
    with httpx.stream("POST", f"{gateway.url}/v1/completions", json=body, timeout=30) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        data = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]"


def test_stop_strings_and_max_tokens(openai_client):
    stopped = openai_client.completions.create(model="echo", prompt="hi", stop="café")
    assert stopped.choices[0].text == "hello from echo, "
    assert stopped.choices[0].finish_reason == "stop"
    short = openai_client.completions.create(model="echo", prompt="hi", max_tokens=10, seed=1)
    assert short.choices[0].finish_reason == "length"
    assert short.usage.completion_tokens <= 10


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"prompt": "x", "suffix": "y"}, "suffix"),
        ({"prompt": "x", "best_of": 2}, "$.best_of"),
        ({"prompt": "x", "n": 9}, "guardrails.max_n"),
        ({"prompt": [1, "two"]}, "mixes token ids"),
        ({"prompt": [[1, 2], []]}, "at least one token"),
        ({"prompt": [1, 2], "echo": True}, "$.echo"),
        ({"prompt": []}, "$.prompt"),
        ({}, "prompt"),
        ({"prompt": "x", "temperature": "hot"}, "$.temperature"),
        ({"prompt": "x", "max_tokens": 0}, "$.max_tokens"),
        ({"prompt": "x", "echo": "yes"}, "$.echo"),
    ],
)
def test_bad_requests_are_openai_shaped_400s(gateway, body, fragment):
    response = httpx.post(f"{gateway.url}/v1/completions", json={"model": "echo", **body})
    assert response.status_code == 400
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"


def test_unknown_model_is_a_404_naming_the_known_ones(openai_client):
    with pytest.raises(openai.NotFoundError) as missing:
        openai_client.completions.create(model="davinci-002", prompt="x")
    message = missing.value.body["message"]
    assert "davinci-002" in message and "echo" in message


def test_a_client_leaving_a_streamed_list_stops_the_running_job_and_the_queued_ones(gateway):
    body = {"model": "slow", "prompt": ["a", "b", "c"], "stream": True}
    with httpx.stream("POST", f"{gateway.url}/v1/completions", json=body, timeout=30) as r:
        lines = r.iter_lines()
        while '"text":"one"' not in next(lines):
            pass
    request_id = r.headers["x-request-id"]
    gateway.wait_event("request_finished", request_id=request_id)
    time.sleep(0.5)  # let the runner settle what was queued behind
    generated = gateway.events("generated", request_id=request_id)
    assert generated[0]["stop_reason"] == "cancelled"
    # The prompts still queued never produce a word.
    assert sum(g["new_tokens"] for g in generated) < len("one two three")
