"""End to end: the shipped config and the real SmolLM2 over the Anthropic protocol, and the
Anthropic examples run against it."""

from __future__ import annotations

import sys

from conftest import run_example

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# This SDK no longer takes sampling arguments (Claude's newest models refuse them); the
# gateway still reads `temperature` from the body, as older clients and curl send it.
GREEDY = {"temperature": 0}


def test_answers_the_capital_of_france(anthropic_client):
    reply = anthropic_client.messages.create(
        model="smollm2", messages=QUESTION, extra_body=GREEDY, max_tokens=40
    )
    assert "Paris" in reply.content[0].text
    assert reply.model == "smollm2"


def test_streamed_text_equals_plain_and_count_tokens_equals_the_prompts_usage(
    gateway, anthropic_client
):
    raw = anthropic_client.messages.with_raw_response.create(
        model="claude-smollm2", messages=QUESTION, extra_body=GREEDY, max_tokens=40
    )
    plain = raw.parse()
    with anthropic_client.messages.stream(
        model="claude-default", messages=QUESTION, extra_body=GREEDY, max_tokens=40
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == plain.content[0].text
    assert final.usage.model_dump() == plain.usage.model_dump()
    counted = anthropic_client.messages.count_tokens(
        model="smollm2", messages=QUESTION
    ).input_tokens
    usage = plain.usage  # the prompt: the rest, what went to a cache tier, what came from one
    prompt = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
    assert counted == prompt
    generated = gateway.wait_event("generated", request_id=raw.headers["x-request-id"])
    assert (generated["prompt_tokens"], generated["new_tokens"]) == (prompt, usage.output_tokens)


def test_the_examples_run_against_the_gateway(gateway):
    sdk = run_example(gateway, sys.executable, "examples/anthropic_sdk.py")
    assert sdk.returncode == 0, sdk.stderr
    assert "Paris" in sdk.stdout
    curl = run_example(gateway, "sh", "examples/curl_anthropic.sh")
    assert curl.returncode == 0, curl.stdout + curl.stderr
    assert "event: message_start" in curl.stdout and "event: message_stop" in curl.stdout
