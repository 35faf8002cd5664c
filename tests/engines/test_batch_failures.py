"""A batch step that raises, over HTTP: every request in it gets its protocol's error."""

from __future__ import annotations

import json
import threading

import httpx

CONFIG = """
models:
  - id: fragile
    engine: scripted
    concurrency: 2
    # Step 6 of the batch raises: both streams already have their first words out.
    script: {reply: "one two three four five six", token_delay: 0.2, fail_step: 6}
"""

HELLO = [{"role": "user", "content": "hi"}]


def stream_lines(gateway, out: list) -> None:
    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json={"model": "fragile", "messages": HELLO, "stream": True},
        timeout=10,
    ) as response:
        out.append([line for line in response.iter_lines() if line.startswith("data: ")])


def test_every_stream_of_a_failed_step_ends_with_an_error_and_the_model_serves_on(start_gateway):
    gateway = start_gateway(CONFIG)
    results: list = []
    threads = [threading.Thread(target=stream_lines, args=(gateway, results)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=15)
    assert len(results) == 2, "a batch-mate of the failed step hung"
    for lines in results:
        last = json.loads(lines[-1].removeprefix("data: "))
        assert "RuntimeError" in last["error"]["message"], lines
        assert lines[-1] != "data: [DONE]"
    failures = gateway.events("batch_failed", model="fragile")
    assert len(failures) == 1 and failures[0]["requests"] == 2
    assert failures[0]["level"] == "error" and "Traceback" in failures[0]["traceback"]
    health = httpx.get(f"{gateway.url}/health").json()["models"]["fragile"]
    assert health["running"] == 0 and health["queue_depth"] == 0
    after = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "fragile", "messages": HELLO},
        timeout=10,
    )
    assert after.status_code == 200
    assert after.json()["choices"][0]["message"]["content"] == "one two three four five six"
