"""Swap-aware admission on a real `gateway serve`: two scripted models that do not fit the
memory budget together. The loaded one serves its queue in a burst bounded by
`server.max_swap_wait` before it is swapped out; no request gets a 503 for want of room."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

HELLO = [{"role": "user", "content": "hi"}]


def config(swap_wait: str) -> str:
    model = (
        "engine: scripted\n    residency: {on_demand: true, idle_ttl: 10m}\n"
        '    script: {reply: "one two three", token_delay: 0.15, memory: 600MiB, load_delay: 0.2}'
    )
    return f"""
server: {{memory_budget: 1GiB, max_swap_wait: {swap_wait}}}
models:
  - id: a
    {model}
  - id: b
    {model}
"""


def chat(gateway, model: str, results: list) -> None:
    body = {"model": model, "messages": HELLO, "max_tokens": 16}
    answer = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)
    results.append((model, answer.status_code, answer.headers.get("x-request-id")))


def until(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def four_to_a_then_one_to_b(gateway) -> list:
    """Four requests to `a` (one runs, three wait), then one to `b`, which needs a's room."""
    results: list = []
    threads = [threading.Thread(target=chat, args=(gateway, "a", results)) for _ in range(4)]
    for thread in threads:
        thread.start()
    until(lambda: len(gateway.events("request_queued", model="a")) == 4)
    threads.append(threading.Thread(target=chat, args=(gateway, "b", results)))
    threads[-1].start()
    for thread in threads:
        thread.join()
    assert [status for _, status, _ in results] == [200] * 5  # none refused for room
    return results


@pytest.mark.parametrize("swap_wait", ["30s", "0s"])
def test_the_loaded_model_serves_a_bounded_burst_before_it_is_swapped(start_gateway, swap_wait):
    gateway = start_gateway(config(swap_wait))
    results = four_to_a_then_one_to_b(gateway)
    waiting = gateway.wait_event("swap_waiting", model="b")
    assert waiting["holders"] == ["a"]
    served = [e["model"] for e in gateway.events("generated")]
    loads = [e["model"] for e in gateway.events("model_attached")]
    if swap_wait == "30s":
        # a's whole queue went first, in one burst: each model loaded once.
        assert served == ["a", "a", "a", "a", "b"] and loads == ["a", "b"]
    else:
        # No burst: a stopped admitting at once, finished the one running, went out with
        # three still waiting, and came back for them after b.
        assert served == ["a", "b", "a", "a", "a"] and loads == ["a", "b", "a"]
    assert {e["reason"] for e in gateway.events("model_detached")} == {"evicted"}
    assert len(results) == 5
