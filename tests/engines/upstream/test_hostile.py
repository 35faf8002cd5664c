"""Engine upstream holds its own limits against a replica that does not: keep-alives are no
answer, `max_tokens` is a cap whatever the replica streams, a malformed chunk is the
replica's failure (502, failover), and a 503 names the replicas that are down and why."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from conftest import free_port
from hostile import HostileReplica

HELLO = [{"role": "user", "content": "hello"}]
LEAKY_KEY = "upkey-secret-0123456789"


@pytest.fixture(scope="module")
def hostile():
    replica = HostileReplica(free_port())
    yield replica
    replica.stop()


def config(hostile: HostileReplica, other: str) -> str:
    return f"""
    models:
      - {{id: pinger, engine: upstream, upstream: {{urls: [{hostile.url}], timeout: 1s}}}}
      - {{id: chatty, engine: upstream, upstream: {{urls: [{hostile.url}]}}}}
      - id: chatty-capped
        engine: upstream
        guardrails: {{max_output_tokens: 4}}
        upstream: {{urls: [{hostile.url}], model: chatty}}
      - id: objecty
        engine: upstream
        upstream: {{urls: [{hostile.url}], check_interval: 1h}}
      - id: objecty-or-fine
        engine: upstream
        upstream: {{urls: [{hostile.url}, {other}], model: objecty, check_interval: 1h}}
      - id: leaky
        engine: upstream
        upstream: {{urls: [{hostile.url}], check_interval: 1h, api_key: {LEAKY_KEY}}}
      - id: nowhere
        engine: upstream
        upstream: {{urls: ["http://user:pw@127.0.0.1:{free_port()}/v1"], timeout: 2s}}
    """


@pytest.fixture(scope="module")
def front(hostile, tmp_path_factory):
    from conftest import serving

    fine = HostileReplica(free_port(), tame=True)
    with serving(tmp_path_factory.mktemp("hostile"), config(hostile, fine.url)) as gateway:
        yield gateway
    fine.stop()


def test_keep_alives_are_not_an_answer(front):
    """A replica that sends `: ping` and empty chunks forever: 504 after the timeout."""
    body = {"model": "pinger", "messages": HELLO, "max_tokens": 8}
    started = time.monotonic()
    answer = httpx.post(f"{front.url}/v1/chat/completions", json=body, timeout=15)
    assert answer.status_code == 504
    assert "did not answer in time" in answer.json()["error"]["message"]
    assert time.monotonic() - started < 5
    # Streaming, the same: the answer ends as a timeout, not after two minutes of pings.
    started = time.monotonic()
    with httpx.stream(
        "POST", f"{front.url}/v1/chat/completions", json={**body, "stream": True}, timeout=15
    ) as response:
        text = response.read().decode()
    assert response.status_code == 504 or "did not answer in time" in text
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("model", "extra", "cap"),
    [("chatty", {"max_tokens": 5}, 5), ("chatty-capped", {}, 4)],
)
def test_max_tokens_is_a_cap_whatever_the_replica_streams(front, model, extra, cap):
    body = {"model": model, "messages": HELLO, **extra}
    answer = httpx.post(f"{front.url}/v1/chat/completions", json=body, timeout=30).json()
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"].split() == [f"w{i}" for i in range(cap)]
    assert answer["usage"]["completion_tokens"] == cap
    chunks = []
    with httpx.stream(
        "POST", f"{front.url}/v1/chat/completions", json={**body, "stream": True}, timeout=30
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line[6:]))
    words = [c["choices"][0]["delta"].get("content") for c in chunks if c.get("choices")]
    assert len([w for w in words if w]) == cap
    assert any(c["choices"][0].get("finish_reason") == "length" for c in chunks if c["choices"])


def test_a_chunk_whose_content_is_an_object_is_a_502_and_fails_over(front):
    body = {"model": "objecty", "messages": HELLO, "max_tokens": 8}
    answer = httpx.post(f"{front.url}/v1/chat/completions", json=body, timeout=15)
    assert answer.status_code == 502
    assert "malformed" in answer.json()["error"]["message"]
    failed = front.events("upstream_failed", model="objecty")
    assert failed and failed[0]["phase"] == "before_first_byte"
    # With a second replica, the request fails over to it before any byte went out.
    for _ in range(3):
        answer = httpx.post(
            f"{front.url}/v1/chat/completions",
            json={**body, "model": "objecty-or-fine"},
            timeout=15,
        )
        assert answer.status_code == 200
        assert answer.json()["choices"][0]["message"]["content"] == "ok"


def test_no_healthy_replica_names_the_replicas_and_why(front):
    body = {"model": "nowhere", "messages": HELLO, "max_tokens": 8}
    answer = httpx.post(f"{front.url}/v1/chat/completions", json=body, timeout=15)
    assert answer.status_code == 503
    message = answer.json()["error"]["message"]
    assert "no upstream replica is healthy" in message
    assert "http://127.0.0.1:" in message and "health check" in message
    assert "pw" not in message.replace("upstream", "")  # the URL's password is not shown
    summary = [e for e in front.events("request_finished") if e["status"] == 503]
    assert summary and "http://127.0.0.1:" in json.dumps(summary[-1])


def test_an_upstreams_error_text_is_redacted_and_capped(front):
    """The replica quotes the key it was sent (in another case) and a bearer token the
    gateway never knew, in 5,000 characters: neither reaches the client or the log."""
    body = {"model": "leaky", "messages": HELLO, "max_tokens": 8}
    answer = httpx.post(f"{front.url}/v1/chat/completions", json=body, timeout=15)
    assert answer.status_code == 502
    message = answer.json()["error"]["message"]
    assert "answered 500" in message and len(message) < 500
    assert "\x1b" not in message and "\n" not in message
    log = front.log.read_text()
    for secret in ("0123456789", "987654321"):
        assert secret not in message and secret not in log
    assert "bearer ***" in message and "BEARER ***" in message
