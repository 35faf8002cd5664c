"""Reload and failed loads against the memory budget (scripted models that claim memory)."""

from __future__ import annotations

import textwrap
import threading
import time

import httpx
import pytest
from conftest import GatewayProcess

HELLO = [{"role": "user", "content": "hi"}]

BIG = """
server: {{memory_budget: 1GiB}}
models:
  - id: big
    engine: scripted
    script: {{reply: "one two three four five six", token_delay: 0.1, memory: 600MiB}}
    {extra}
"""


class Gateway(GatewayProcess):
    def __init__(self, tmp_path, text):
        self.config = tmp_path / "models.yaml"
        self.write(text)
        super().__init__(self.config, tmp_path / "events.jsonl")
        self.wait_ready()

    def write(self, text):
        self.config.write_text(textwrap.dedent(text))

    def reload(self, text=None):
        if text is not None:
            self.write(text)
        return httpx.post(f"{self.url}/admin/reload", timeout=30)

    def chat(self, model):
        return httpx.post(
            f"{self.url}/v1/chat/completions",
            json={"model": model, "messages": HELLO},
            timeout=30,
        )

    def state(self, model):
        return httpx.get(f"{self.url}/health").json()["models"][model]["state"]


@pytest.fixture
def gateway(tmp_path):
    process = Gateway(tmp_path, BIG.format(extra=""))
    yield process
    process.stop()


def test_a_changed_model_that_cannot_fit_twice_drains_the_old_runner_first(gateway):
    streamed: list[str] = []

    def stream():
        with httpx.stream(
            "POST",
            f"{gateway.url}/v1/chat/completions",
            json={"model": "big", "messages": HELLO, "stream": True},
            timeout=30,
        ) as response:
            streamed.extend(response.iter_lines())

    reader = threading.Thread(target=stream)
    reader.start()
    time.sleep(0.2)  # the stream is running on the old runner
    answer = gateway.reload(BIG.format(extra="rate: {max_tokens_per_sec: 1000}"))
    reader.join(timeout=30)
    assert answer.status_code == 200
    body = answer.json()
    assert body["restarted"] == ["big"] and body["drained_first"] == ["big"]
    assert body["failed"] == {}
    assert [line for line in streamed if line][-1] == "data: [DONE]"  # finished on the old one
    assert gateway.state("big") == "ready"
    assert gateway.chat("big").status_code == 200
    reloaded = gateway.wait_event("config_reloaded")
    assert reloaded["drained_first"] == ["big"] and reloaded["failed"] == {}


def test_a_changed_model_that_fails_to_load_is_reported_and_the_previous_one_serves(gateway):
    answer = gateway.reload(
        BIG.format(extra="rate: {max_tokens_per_sec: 1000}").replace("600MiB", "2GiB")
    )
    assert answer.status_code == 200
    failed = answer.json()["failed"]
    assert "memory budget" in failed["big"] and "previous settings" in failed["big"]
    assert gateway.wait_event("config_reloaded")["failed"] == failed
    assert gateway.chat("big").status_code == 200
    # The next reload tries the changed settings again (they are not taken as applied).
    again = gateway.reload()
    assert again.json()["changed"] == ["big"] and "big" in again.json()["failed"]


def test_a_failed_pinned_model_loads_again_by_the_admin_route_and_by_reload(tmp_path):
    two = """
    server: {memory_budget: 1GiB}
    models:
      - id: first
        engine: scripted
        script: {memory: 600MiB}
      - id: second
        engine: scripted
        script: {memory: 600MiB}
    """
    gateway = Gateway(tmp_path, two)
    try:
        assert gateway.state("second") == "failed"
        assert gateway.chat("second").status_code == 503
        admin = f"{gateway.url}/admin/models"
        assert httpx.post(f"{admin}/first/unload").status_code == 200
        loaded = httpx.post(f"{admin}/second/load")
        assert loaded.json()["state"] == "ready", loaded.json()
        assert gateway.chat("second").status_code == 200
        # Now `first` cannot come back while `second` holds the memory: a reload says so.
        assert httpx.post(f"{admin}/first/load").json()["state"] == "failed"
        assert httpx.post(f"{admin}/second/unload").status_code == 200
        reloaded = gateway.reload()
        assert reloaded.json()["failed"] == {}
        assert gateway.state("first") == "ready"
    finally:
        gateway.stop()


def test_a_failed_on_demand_model_is_tried_again_by_a_request_after_a_back_off(tmp_path):
    config = """
    server: {memory_budget: 1GiB}
    models:
      - id: resident
        engine: scripted
        script: {memory: 600MiB}
      - id: lazy
        engine: scripted
        residency: {on_demand: true}
        script: {memory: 600MiB}
    """
    gateway = Gateway(tmp_path, config)
    try:
        first = gateway.chat("lazy")
        assert first.status_code == 503 and "memory budget" in first.json()["error"]["message"]
        refused = gateway.chat("lazy")  # within the back-off: refused without a new load
        assert refused.status_code == 503 and refused.headers.get("retry-after")
        assert len(gateway.events("model_loading", model="lazy")) == 1
        assert httpx.post(f"{gateway.url}/admin/models/resident/unload").status_code == 200
        time.sleep(1.2)
        assert gateway.chat("lazy").status_code == 200
        assert gateway.state("lazy") == "ready"
    finally:
        gateway.stop()


def test_concurrent_loads_never_hold_more_than_the_budget(tmp_path):
    config = """
    server: {memory_budget: 1GiB}
    models:
      - id: left
        engine: scripted
        residency: {on_demand: true}
        script: {reply: "a b c d e", token_delay: 0.2, memory: 600MiB}
      - id: right
        engine: scripted
        residency: {on_demand: true}
        script: {reply: "a b c d e", token_delay: 0.2, memory: 600MiB}
    """
    gateway = Gateway(tmp_path, config)
    try:
        answers: dict[str, int] = {}
        threads = [
            threading.Thread(target=lambda m=m: answers.update({m: gateway.chat(m).status_code}))
            for m in ("left", "right")
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        # Both asked at once: one loads, the other waits for it to finish and be evicted
        # (swap-aware admission, server.max_swap_wait) — never both resident.
        assert sorted(answers.values()) == [200, 200], answers
        order = [
            (e["event"], e["model"])
            for e in gateway.events()
            if e["event"] in ("model_attached", "model_detached")
        ]
        first, second = order[0][1], order[-1][1]
        assert order == [
            ("model_attached", first), ("model_detached", first), ("model_attached", second)
        ]  # fmt: skip
        loaded = httpx.get(f"{gateway.url}/api/ps").json()["models"]
        assert sum(m["size"] for m in loaded) <= 2**30
    finally:
        gateway.stop()
