"""Clients that leave: their jobs end with their requests, and the log says 499."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from conftest import serving

WORDS = " ".join(["word"] * 400)
CONFIG = f"""
models:
  - id: long
    engine: scripted
    concurrency: 4
    # About 20 s of words if nobody stops it.
    script: {{reply: "{WORDS}", token_delay: 0.05}}
"""

PROTOCOLS = [
    (
        "/v1/chat/completions",
        {"model": "long", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    ),
    ("/v1/completions", {"model": "long", "stream": True, "prompt": "hi"}),
    (
        "/v1/messages",
        {
            "model": "long",
            "stream": True,
            "max_tokens": 4000,
            "messages": [{"role": "user", "content": "hi"}],
        },
    ),
    ("/api/chat", {"model": "long", "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/responses", {"model": "long", "stream": True, "input": "hi"}),
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("leaves"), CONFIG) as process:
        yield process


def leave_after(port: int, path: str, body: dict, delay: float) -> None:
    """Send a request, wait `delay`, and close the connection without reading on."""
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head + data)
        time.sleep(delay)


def test_every_job_ends_when_its_client_leaves_whenever_it_leaves(gateway):
    delays = [0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3]
    sent = 0
    for path, body in PROTOCOLS:
        for delay in delays:
            leave_after(gateway.port, path, body, delay)
            sent += 1
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        health = httpx.get(f"{gateway.url}/health").json()["models"]["long"]
        if health["running"] == 0 and health["queue_depth"] == 0:
            break
        time.sleep(0.1)
    assert health["running"] == 0 and health["queue_depth"] == 0, health
    generated = gateway.events("generated", model="long")
    assert generated and all(g["stop_reason"] == "cancelled" for g in generated)
    assert all(g["new_tokens"] < 400 * 5 for g in generated)
    posted = {e["request_id"] for e in gateway.events("request_started", method="POST")}
    statuses = [
        e["status"] for e in gateway.events("request_finished") if e["request_id"] in posted
    ]
    assert len(statuses) == sent and set(statuses) == {499}, statuses
