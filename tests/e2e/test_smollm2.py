"""End to end: `gateway serve` on the shipped config and the real SmolLM2 model, via `openai`."""

from __future__ import annotations

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def test_startup_line_says_which_platform_path_runs(gateway):
    started = gateway.events("server_started")[0]
    assert started["platform"]["device"] == "cpu"
    assert started["platform"]["blas"] == "openblas"  # setup.sh installs it; serve preloads it
    assert started["platform"]["weights"] == "float32"
    # What the device is and the memory `memory_budget: auto` takes its share of.
    assert started["platform"]["device_name"]
    assert started["platform"]["memory"].endswith(" GiB RAM")
    attached = gateway.events("model_attached", model="smollm2")[0]
    assert attached["context"] == 8192 and attached["memory_bytes"] > 100_000_000


def test_answers_the_capital_of_france(openai_client):
    reply = openai_client.chat.completions.create(
        model="smollm2", messages=QUESTION, temperature=0, max_tokens=40
    )
    assert "Paris" in reply.choices[0].message.content
    assert reply.model == "smollm2"


def test_streamed_text_equals_plain_text_and_usage_equals_the_generated_event(
    gateway, openai_client
):
    plain = openai_client.chat.completions.with_raw_response.create(
        model="default", messages=QUESTION, temperature=0, max_tokens=40
    )
    request_id = plain.headers["x-request-id"]
    plain = plain.parse()
    stream = openai_client.chat.completions.create(
        model="gpt-4o-mini",
        messages=QUESTION,
        temperature=0,
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == plain.choices[0].message.content
    assert chunks[-1].usage.model_dump() == plain.usage.model_dump()
    generated = gateway.wait_event("generated", request_id=request_id)
    assert plain.usage.prompt_tokens == generated["prompt_tokens"]
    assert plain.usage.completion_tokens == generated["new_tokens"]
    assert generated["prefill_s"] > 0 and generated["decode_s"] > 0


def test_max_tokens_and_stop_strings_on_the_real_model(openai_client):
    short = openai_client.chat.completions.create(
        model="smollm2", messages=QUESTION, temperature=0, max_tokens=3
    )
    assert short.usage.completion_tokens == 3
    assert short.choices[0].finish_reason == "length"
    stopped = openai_client.chat.completions.create(
        model="smollm2", messages=QUESTION, temperature=0, max_tokens=40, stop=["Paris"]
    )
    assert "Paris" not in stopped.choices[0].message.content
    assert stopped.choices[0].finish_reason == "stop"


def test_non_ascii_streams_without_replacement_characters(openai_client):
    stream = openai_client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "Write three emoji and the word café."}],
        temperature=0,
        max_tokens=40,
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text and "\ufffd" not in text


def test_the_scripted_model_beside_it_is_served_too(openai_client):
    reply = openai_client.chat.completions.create(model="echo", messages=QUESTION)
    assert reply.choices[0].message.content == "hello from echo"
