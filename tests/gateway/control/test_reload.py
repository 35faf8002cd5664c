"""Reload on a real process: validated, diffed, drained, atomic — through every trigger."""

from __future__ import annotations

import asyncio
import os
import signal
import textwrap
import threading
import time

import httpx
import pytest
from conftest import GatewayProcess

HELLO = [{"role": "user", "content": "hi"}]

BASE = """
server:
  fallback: echo
models:
  - id: echo
    engine: scripted
    aliases: [e]
    script: {reply: "hello from echo"}
  - id: slow
    engine: scripted
    script: {reply: "old one two three four five six seven eight", token_delay: 0.1}
  - id: gone
    engine: scripted
    script: {reply: "soon removed one two three four five six", token_delay: 0.2}
"""


class Gateway(GatewayProcess):
    def __init__(self, tmp_path, text, **kw):
        self.config = tmp_path / "models.yaml"
        self.write(text)
        super().__init__(self.config, tmp_path / "events.jsonl", **kw)
        self.wait_ready()

    def write(self, text):
        self.config.write_text(textwrap.dedent(text))

    def reload(self, text=None, **headers):
        if text is not None:
            self.write(text)
        return httpx.post(f"{self.url}/admin/reload", headers=headers, timeout=30)

    def chat(self, model, **body):
        return httpx.post(
            f"{self.url}/v1/chat/completions",
            json={"model": model, "messages": HELLO, **body},
            timeout=30,
        )


@pytest.fixture
def gateway(tmp_path):
    process = Gateway(tmp_path, BASE)
    yield process
    process.stop()


def test_admin_reload_answers_the_diff_and_logs_it(gateway):
    edited = (
        BASE.replace("aliases: [e]", "aliases: [e, e2]")
        .replace('"soon removed one two three four five six"', '"changed"')
        .replace("  - id: slow", "  - id: fresh\n    engine: scripted\n  - id: slow")
    )
    response = gateway.reload(edited)
    assert response.status_code == 200
    diff = response.json()
    assert diff == {
        "added": ["fresh"],
        "removed": [],
        "changed": ["echo", "gone"],
        "unchanged": ["slow"],
        "restarted": ["gone"],
        "drained_first": [],
        "failed": {},
    }
    event = gateway.wait_event("config_reloaded", trigger="admin")
    assert event["changed"] == ["echo", "gone"]
    assert gateway.chat("e2").json()["model"] == "echo"  # the new alias routes at once
    assert gateway.chat("fresh").status_code == 200
    assert gateway.chat("gone").json()["choices"][0]["message"]["content"] == "changed"
    # An alias-only change never reloads weights: echo loaded once, at startup.
    assert len(gateway.events("model_loading", model="echo")) == 1


@pytest.mark.parametrize(
    "broken, fragment",
    [
        ("models:\n  - id: echo\n    engine: [scripted\n", "<yaml>"),
        (BASE.replace("aliases: [e]", "aliasses: [e]"), "unknown key 'aliasses'"),
        (
            BASE.replace(
                'script: {reply: "soon removed', 'aliases: [e]\n    script: {reply: "soon removed'
            ),
            "alias",
        ),
        (
            BASE + "  - id: real\n    source: ./no-such-model.gguf\n",
            "no-such-model.gguf: not found",
        ),
    ],
)
def test_an_invalid_file_is_refused_whole_and_the_old_config_keeps_serving(
    gateway, broken, fragment
):
    response = gateway.reload(broken)
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]
    rejected = gateway.wait_event("config_rejected")
    assert any(fragment in e for e in rejected["errors"])
    assert gateway.chat("e").json()["choices"][0]["message"]["content"] == "hello from echo"
    assert not gateway.events("config_reloaded")


def test_sighup_goes_through_the_same_path(gateway):
    gateway.write(BASE.replace("aliases: [e]", "aliases: [e, via-hup]"))
    os.kill(gateway.process.pid, signal.SIGHUP)
    event = gateway.wait_event("config_reloaded", trigger="sighup")
    assert event["changed"] == ["echo"]
    assert gateway.chat("via-hup").json()["model"] == "echo"


def test_file_watch_applies_edits_and_ignores_a_missing_file(tmp_path):
    gateway = Gateway(
        tmp_path, BASE.replace("fallback: echo", "fallback: echo\n  watch_config: true")
    )
    try:
        text = gateway.config.read_text()
        # An editor's dance: the file vanishes for a moment, then comes back edited.
        gateway.config.unlink()
        time.sleep(0.6)
        gateway.write(text.replace("aliases: [e]", "aliases: [e, watched]"))
        event = gateway.wait_event("config_reloaded", trigger="watch", timeout=15)
        assert event["removed"] == [] and event["changed"] == ["echo"]
        assert len(gateway.events("config_reloaded")) == 1
        assert gateway.chat("watched").json()["model"] == "echo"
    finally:
        gateway.stop()


def test_changed_model_finishes_its_stream_on_the_old_runner(gateway):
    def stream():
        with httpx.stream(
            "POST",
            f"{gateway.url}/v1/chat/completions",
            timeout=30,
            json={"model": "slow", "messages": HELLO, "stream": True},
        ) as r:
            result["text"] = "".join(line for line in r.iter_lines() if line.startswith("data: {"))

    result = {}
    thread = threading.Thread(target=stream)
    thread.start()
    gateway.wait_event("request_queued", model="slow")
    time.sleep(0.2)
    assert gateway.reload(BASE.replace('"old one two', '"new one two')).json()["restarted"] == [
        "slow"
    ]
    thread.join()
    assert '"old"' in result["text"] and "eight" in result["text"]
    assert gateway.chat("slow").json()["choices"][0]["message"]["content"].startswith("new")
    detached = gateway.wait_event("model_detached", model="slow")
    assert detached["reason"] == "changed"


def test_removed_model_refuses_its_queue_and_finishes_what_runs(gateway):
    results = {}

    def ask(name):
        results[name] = gateway.chat("gone")

    running = threading.Thread(target=ask, args=("running",))
    running.start()
    gateway.wait_event("request_queued", model="gone")
    time.sleep(0.1)
    queued = threading.Thread(target=ask, args=("queued",))
    queued.start()
    time.sleep(0.2)
    without_gone = BASE[: BASE.index("  - id: gone")]
    assert gateway.reload(without_gone).json()["removed"] == ["gone"]
    queued.join()
    running.join()
    assert results["running"].json()["choices"][0]["message"]["content"].endswith("five six")
    assert results["queued"].status_code == 503
    assert "removed" in results["queued"].json()["error"]["message"]
    assert gateway.chat("gone").json()["model"] == "echo"  # now unknown: the fallback serves
    assert gateway.wait_event("model_detached", model="gone")["reason"] == "removed"


def test_eight_streaming_clients_through_twenty_reloads_lose_nothing(gateway):
    variants = [
        BASE,
        BASE.replace("aliases: [e]", "aliases: [e, extra]"),
        BASE.replace("fallback: echo", "fallback: echo\ndefaults:\n  sampling: {max_tokens: 300}"),
        BASE[: BASE.index("  - id: gone")],
    ]

    async def client(reloading: asyncio.Event):
        failures, done = [], 0
        async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
            while not reloading.is_set():
                model = "slow" if done % 4 == 0 else "e"
                body = {"model": model, "messages": HELLO, "stream": True}
                async with http.stream("POST", "/v1/chat/completions", json=body) as r:
                    text = "".join([line async for line in r.aiter_lines()])
                if r.status_code != 200 or "[DONE]" not in text:
                    failures.append((model, r.status_code, text[:200]))
                done += 1
        return failures, done

    async def scenario():
        finished = asyncio.Event()
        clients = [asyncio.ensure_future(client(finished)) for _ in range(8)]
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
            for i in range(20):
                gateway.write(variants[i % len(variants)])
                response = await http.post("/admin/reload")
                assert response.status_code == 200, response.text
                await asyncio.sleep(0.15)
        finished.set()
        return await asyncio.gather(*clients)

    outcomes = asyncio.run(_bounded(scenario()))
    failures = [f for fails, _ in outcomes for f in fails]
    assert failures == []
    assert all(done >= 1 for _, done in outcomes)
    reloads = [e["ts"] for e in gateway.events("config_reloaded")]
    during = [e for e in gateway.events("generated") if reloads[0] < e["ts"] < reloads[-1]]
    assert len(during) >= 8  # streams really were running across the reloads
    assert len(gateway.events("config_reloaded")) == 20


async def _bounded(coroutine):
    return await asyncio.wait_for(coroutine, timeout=120)
