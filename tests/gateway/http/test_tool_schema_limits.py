"""Tool and output schemas are bounded per request (`server.limits.max_tool_schema_bytes`):
checking and compiling them holds the GIL, so past the cap they are refused before any work,
and the event loop stays quick for everyone else (issue 24.2)."""

from __future__ import annotations

import json
import statistics
import threading
import time

import httpx
from conftest import serving

CONFIG = "models:\n  - id: echo\n    engine: scripted\n    script: {reply: '{\"a\": 1}'}\n"
HI = [{"role": "user", "content": "hi"}]


def big_schema(k: int, properties: int = 2400) -> dict:
    """About 0.34 MiB of JSON Schema at the default size."""
    item = {
        "type": "object",
        "properties": {"a": {"type": "string", "enum": ["x", "y"]}, "b": {"type": "integer"}},
        "required": ["a"],
    }
    return {"type": "object", "properties": {f"p{k}_{i}": item for i in range(properties)}}


def tool(k: int, **fields) -> dict:
    return {
        "type": "function",
        "function": {"name": f"t{k}", "parameters": big_schema(k, **fields)},
    }


def test_schemas_past_the_cap_are_refused_at_once_and_health_stays_quick(tmp_path):
    with serving(tmp_path, CONFIG) as gateway:
        body = {"model": "echo", "messages": HI, "tools": [tool(k) for k in range(16)]}
        body["tool_choice"] = "required"
        latencies: list[float] = []
        done = threading.Event()

        def probe() -> None:
            while not done.is_set():
                started = time.perf_counter()
                httpx.get(f"{gateway.url}/health", timeout=120)
                latencies.append(time.perf_counter() - started)
                time.sleep(0.02)

        prober = threading.Thread(target=probe)
        prober.start()
        try:
            response = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=300)
        finally:
            done.set()
            prober.join()
        assert response.status_code == 400, response.text[:300]
        message = response.json()["error"]["message"]
        assert "$.tools" in message and "max_tool_schema_bytes" in message
        # A generous bound: a loaded CI machine once took 0.51 s with the cap working, while
        # checking 5 MiB of schema under the GIL would hold the loop far longer.
        assert max(latencies) < 2.0, max(latencies)
        anthropic = {
            "model": "echo",
            "max_tokens": 5,
            "messages": HI,
            "tools": [{"name": "t", "input_schema": big_schema(0, properties=6000)}],
        }
        refused = httpx.post(f"{gateway.url}/v1/messages", json=anthropic, timeout=60)
        assert refused.status_code == 400 and refused.json()["type"] == "error"
        assert "max_tool_schema_bytes" in refused.json()["error"]["message"]
        small = {"model": "echo", "messages": HI, "tools": [tool(0, properties=20)]}
        assert httpx.post(f"{gateway.url}/v1/chat/completions", json=small).status_code == 200


def health_latencies(url: str, until: threading.Event, into: list[float]) -> None:
    with httpx.Client(timeout=120) as client:
        while not until.is_set():
            started = time.perf_counter()
            client.get(f"{url}/health")
            into.append(time.perf_counter() - started)
            time.sleep(0.01)


def test_health_stays_as_quick_as_when_idle_while_a_half_mib_schema_is_checked(tmp_path):
    with serving(tmp_path, CONFIG) as gateway:
        # Just under the cap: accepted, so every check and compile runs on it.
        body = {"model": "echo", "messages": HI, "tools": [tool(0, properties=3500)]}
        body["tool_choice"] = "required"
        data = json.dumps(body).encode()
        assert 450_000 < len(data) < 512 * 1024
        idle: list[float] = []
        done = threading.Event()
        prober = threading.Thread(target=health_latencies, args=(gateway.url, done, idle))
        prober.start()
        time.sleep(2)
        done.set()
        prober.join()

        busy: list[float] = []
        done = threading.Event()
        prober = threading.Thread(target=health_latencies, args=(gateway.url, done, busy))
        prober.start()
        try:
            response = httpx.post(
                f"{gateway.url}/v1/chat/completions",
                content=data,
                headers={"content-type": "application/json"},
                timeout=300,
            )
        finally:
            done.set()
            prober.join()
        # Checked whole and accepted; the scripted model then counts its prompt too long.
        assert response.status_code == 400, response.text[:300]
        assert "context window" in response.json()["error"]["message"]
        # /health was answered many times while the schema was worked on, and most of them
        # as fast as on the idle gateway: the lower quartile against the idle median, so a
        # loaded machine's slowness (which both share) does not decide it. With the check on
        # a thread of the gateway's, holding the GIL, every probe was 3-6 times slower.
        assert len(busy) >= 10, busy
        quartile = statistics.quantiles(busy, n=4)[0]
        idle_median = statistics.median(idle)
        assert quartile < 2 * idle_median, (quartile, idle_median)
