"""SIGTERM: new requests get 503 in their protocol's envelope while the socket stays open,
`/health` says draining, the request in flight finishes, the models unload, exit code 0."""

from __future__ import annotations

import signal

import httpx

WORDS = " ".join(f"w{i}" for i in range(16))
SLOW = f"""
models:
  - id: echo
    engine: scripted
    script: {{reply: "{WORDS}", token_delay: 0.3}}
"""
HELLO = [{"role": "user", "content": "hello"}]


def test_sigterm_drains_then_exits_zero(start_gateway):
    gateway = start_gateway(SLOW)
    body = {"model": "echo", "messages": HELLO, "stream": True}
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as stream:
        lines = stream.iter_lines()
        first = next(line for line in lines if "w0" in line)  # generating now: in flight
        gateway.process.send_signal(signal.SIGTERM)
        gateway.wait_event("server_draining")
        refused = {
            "/v1/chat/completions": httpx.post(f"{gateway.url}/v1/chat/completions", json=body),
            "/v1/messages": httpx.post(f"{gateway.url}/v1/messages", json=body),
            "/api/chat": httpx.post(f"{gateway.url}/api/chat", json=body),
            "/v1/models": httpx.get(f"{gateway.url}/v1/models"),
        }
        for path, answer in refused.items():
            assert answer.status_code == 503, path
            assert answer.headers["retry-after"] and answer.headers["connection"] == "close"
        assert refused["/v1/chat/completions"].json()["error"]["type"] == "overloaded_error"
        assert refused["/v1/messages"].json()["error"]["type"] == "overloaded_error"
        assert "shutting down" in refused["/api/chat"].json()["error"]
        health = httpx.get(f"{gateway.url}/health")
        assert health.status_code == 503 and health.json()["status"] == "draining"
        rest = [line for line in lines if line.startswith("data: ")]
    text = first + "".join(rest)
    assert all(f"w{i}" in text for i in range(16)) and rest[-1] == "data: [DONE]"
    assert gateway.process.wait(timeout=60) == 0
    draining = gateway.events("server_draining")[0]
    assert draining["in_flight"] == 1 and draining["grace_s"] == 30
    stopping = gateway.events("server_stopping")[0]
    assert stopping["drained"] is True and stopping["left_in_flight"] == 0
    assert gateway.events("model_detached", model="echo", reason="shutdown")
    finished = gateway.events("request_finished")
    assert [e["status"] for e in finished].count(503) == 5  # four refused, /health
    assert any(e["status"] == 200 for e in finished)


def test_the_grace_period_bounds_the_drain(start_gateway):
    gateway = start_gateway(
        f"""
        server:
          shutdown_grace: 1s
        models:
          - id: echo
            engine: scripted
            script: {{reply: "{" ".join(["word"] * 400)}", token_delay: 0.2}}
        """
    )
    body = {"model": "echo", "messages": HELLO, "stream": True}
    try:
        with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as stream:
            lines = stream.iter_lines()
            next(line for line in lines if "word" in line)
            gateway.process.send_signal(signal.SIGTERM)
            for _ in lines:
                pass
    except httpx.HTTPError:
        pass  # the stream is cut when the grace period runs out: that is the point
    assert gateway.process.wait(timeout=60) == 0
    stopping = gateway.events("server_stopping")[0]
    assert stopping["drained"] is False and stopping["left_in_flight"] == 1
    assert gateway.events("model_detached", model="echo", reason="shutdown")
