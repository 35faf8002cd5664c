"""End to end on the real SmolLM2 (shipped config): completions, responses and the examples."""

from __future__ import annotations

import sys

from conftest import run_example

QUESTION = "What is the capital of France?"


def test_a_raw_prompt_is_continued_with_paris(gateway, openai_client):
    raw = openai_client.completions.with_raw_response.create(
        model="smollm2", prompt="The capital of France is", temperature=0, max_tokens=8
    )
    completion = raw.parse()
    assert "Paris" in completion.choices[0].text
    generated = gateway.wait_event("generated", request_id=raw.headers["x-request-id"])
    # No chat template around it: a handful of tokens, not a templated conversation.
    assert completion.usage.prompt_tokens == generated["prompt_tokens"] < 10


def test_responses_answer_paris_and_the_stream_says_the_same(openai_client):
    plain = openai_client.responses.create(
        model="smollm2", input=QUESTION, temperature=0, max_output_tokens=40
    )
    assert "Paris" in plain.output_text
    with openai_client.responses.stream(
        model="smollm2", input=QUESTION, temperature=0, max_output_tokens=40
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        # A 40-token cap may cut the answer: then the stream ends `response.incomplete`.
        final = stream.get_final_response() if plain.status == "completed" else None
    assert "".join(deltas) == plain.output_text
    if final is not None:
        assert final.output_text == plain.output_text
        # The same counts; the second request read the first's prompt from the cache.
        counts = ("input_tokens", "output_tokens", "total_tokens")
        assert [getattr(final.usage, k) for k in counts] == [
            getattr(plain.usage, k) for k in counts
        ]


def test_the_openai_sdk_example_runs(gateway):
    done = run_example(gateway, sys.executable, "-W", "error", "examples/openai_sdk.py")
    assert done.returncode == 0, done.stderr
    for label in ["chat:", "chat stream:", "completion:", "response:", "response stream:"]:
        assert label in done.stdout
    assert "Paris" in done.stdout


def test_the_curl_example_runs(gateway):
    done = run_example(gateway, "sh", "examples/curl_openai.sh")  # as its siblings run
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("== ") == 6
    assert "data: [DONE]" in done.stdout and "event: response.created" in done.stdout
