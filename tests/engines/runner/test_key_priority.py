"""Priority in a model's queue, on a real `gateway serve` with scripted models: a
high-priority request goes before a low-priority flood, the key's ceiling clamps what a
request asks, and aging bounds how long a low-priority request can be overtaken."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import httpx
import pytest

HELLO = [{"role": "user", "content": "hi"}]
BATCH, CHAT = "sk-batch-0123456789", "sk-chat-0123456789"
CONFIG = f"""
server:
  api_keys:
    - {{key: {BATCH}, label: batch}}
    - {{key: {CHAT}, label: chat, priority: {{default: 5, max: 10}}}}
models:
  - id: flooded
    engine: scripted
    queue: {{aging: 10s}}
    script: {{reply: "a b c d e f g h i j", token_delay: 0.25}}
  - id: aged
    engine: scripted
    queue: {{aging: 200ms}}
    script: {{reply: "a b c", token_delay: 0.06}}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from conftest import serving

    with serving(tmp_path_factory.mktemp("priority"), CONFIG) as process:
        yield process


def chat(
    gateway, model: str, key: str, results: list, priority: str | None = None, tokens: int = 1
) -> None:
    headers = {"authorization": f"Bearer {key}"}
    if priority is not None:
        headers["x-gateway-priority"] = priority
    body = {"model": model, "messages": HELLO, "max_tokens": tokens}
    answer = httpx.post(
        f"{gateway.url}/v1/chat/completions", json=body, headers=headers, timeout=60
    )
    results.append(answer)


def started(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args)
    thread.start()
    return thread


def queued(gateway, model: str) -> list[dict]:
    return gateway.events("request_queued", model=model)


def until(condition, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_high_priority_request_is_admitted_before_a_low_priority_flood(gateway):
    results: list[httpx.Response] = []
    # The first runs for a few seconds (ten words), while the others queue behind it.
    threads = [started(chat, gateway, "flooded", BATCH, results, None, 30)]
    until(lambda: len(queued(gateway, "flooded")) == 1)
    threads += [started(chat, gateway, "flooded", BATCH, results, "50") for _ in range(5)]
    until(lambda: len(queued(gateway, "flooded")) == 6)
    high: list[httpx.Response] = []
    threads.append(started(chat, gateway, "flooded", CHAT, high))
    for thread in threads:
        thread.join()
    assert [r.status_code for r in results + high] == [200] * 7
    # The batch key asked for 50 and got its ceiling, 0; the chat key its default, 5.
    priorities = [e["priority"] for e in queued(gateway, "flooded")]
    assert priorities == [0] * 6 + [5]
    order = [e["request_id"] for e in gateway.events("generated", model="flooded")]
    assert order.index(high[0].headers["x-request-id"]) == 1  # right after the one running


def test_aging_bounds_how_long_a_low_priority_request_is_overtaken(gateway):
    """Priority 5 against 0 with `queue.aging: 200ms`: the low request may be overtaken
    only by high ones that arrived at most 5 x 200ms = 1s after it, however long the
    stream of high-priority requests goes on."""
    results: list[httpx.Response] = []
    threads = []
    low: list[httpx.Response] = []
    for i in range(40):  # ~4 s of arrivals, faster than the model serves them
        threads.append(started(chat, gateway, "aged", CHAT, results, None, 8))
        if i == 5:
            threads.append(started(chat, gateway, "aged", BATCH, low, None, 8))
        time.sleep(0.08)
    for thread in threads:
        thread.join()
    assert [r.status_code for r in results + low] == [200] * 41
    arrival = {
        e["request_id"]: datetime.fromisoformat(e["ts"]).timestamp()
        for e in queued(gateway, "aged")
    }
    order = [e["request_id"] for e in gateway.events("generated", model="aged")]
    low_id = low[0].headers["x-request-id"]
    before = order[: order.index(low_id)]
    overtook = [arrival[r] - arrival[low_id] for r in before if arrival[r] > arrival[low_id]]
    assert overtook, "no high-priority request went first: priority did nothing"
    assert max(overtook) <= 1.0 + 0.15  # the bound, and the time between arrival and queue
    assert len(order) - 1 - order.index(low_id) >= 10  # many arrived later and went after
