"""End to end: the shipped config and the real SmolLM2 over the Ollama protocol, and the
Ollama examples run against it."""

from __future__ import annotations

import json
import sys

import httpx
from conftest import run_example

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
GREEDY = {"temperature": 0, "num_predict": 40}


def test_answers_the_capital_of_france(ollama_client):
    reply = ollama_client.chat(model="smollm2", messages=QUESTION, options=GREEDY)
    assert "Paris" in reply.message.content
    assert reply.model == "smollm2" and reply.done_reason in ("stop", "length")


def test_streamed_equals_plain_and_counts_equal_the_generated_event(gateway, ollama_client):
    body = {"model": "default:latest", "messages": QUESTION, "options": GREEDY, "stream": False}
    response = httpx.post(f"{gateway.url}/api/chat", json=body, timeout=120)
    plain = response.json()
    generated = gateway.wait_event("generated", request_id=response.headers["x-request-id"])
    assert (generated["prompt_tokens"], generated["new_tokens"]) == (
        plain["prompt_eval_count"],
        plain["eval_count"],
    )
    parts = list(
        ollama_client.chat(model="smollm2", messages=QUESTION, options=GREEDY, stream=True)
    )
    assert "".join(p.message.content for p in parts) == plain["message"]["content"]
    final = parts[-1]
    assert final.done and (final.prompt_eval_count, final.eval_count) == (
        plain["prompt_eval_count"],
        plain["eval_count"],
    )
    assert final.prompt_eval_duration > 0 and final.eval_duration > 0


def test_generate_and_the_model_routes(gateway, ollama_client):
    reply = ollama_client.generate(model="smollm2", prompt=QUESTION[0]["content"], options=GREEDY)
    assert "Paris" in reply.response
    assert "smollm2" in {m.model for m in ollama_client.ps().models}
    shown = ollama_client.show("smollm2")
    attached = gateway.events("model_attached", model="smollm2")[-1]
    assert shown.modelinfo["mlx.context_length"] == attached["context"]
    assert shown.details.format == "mlx"


def test_the_examples_run_against_the_gateway(gateway):
    sdk = run_example(gateway, sys.executable, "examples/ollama_sdk.py")
    assert sdk.returncode == 0, sdk.stderr
    assert "Paris" in sdk.stdout and "loaded: " in sdk.stdout
    curl = run_example(gateway, "sh", "examples/curl_ollama.sh")
    assert curl.returncode == 0, curl.stdout + curl.stderr
    lines = [json.loads(line) for line in curl.stdout.splitlines() if line.strip()]
    chat, generate, tags = lines[:-2], lines[-2], lines[-1]
    assert chat[-1]["done"] is True and "Paris" in "".join(c["message"]["content"] for c in chat)
    assert "Paris" in generate["response"]
    assert "smollm2" in {m["name"] for m in tags["models"]}
