"""Per-key limits on a real `gateway serve`: each limit answered with each protocol's 429,
its own error shape and the rate-limit headers its clients read (through the official
clients), the budget's renewal, and a reload retuning a key's limits under load."""

from __future__ import annotations

import threading
import time

import anthropic
import httpx
import ollama
import openai
import pytest

HELLO = [{"role": "user", "content": "hello"}]
PROTOCOLS = ["openai", "anthropic", "ollama"]
LIMITS = {
    "rpm": "{rpm: 2}",
    "tpm": "{tpm: 40}",
    "concurrent": "{concurrent: 1}",
    "budget": "{budget: {tokens: 40, period: 4s}}",
}


def secret(limit: str, protocol: str) -> str:
    return f"sk-{limit}-{protocol}-0123456789"


KEYS = "\n".join(
    f"    - {{key: {secret(limit, protocol)}, label: {limit}-{protocol}, limits: {spec}}}"
    for limit, spec in LIMITS.items()
    for protocol in PROTOCOLS
)
CONFIG = f"""
server:
  admin_key: adm-secret-0123456789
  api_keys:
    - {{key: sk-free-0123456789, label: free}}
{KEYS}
models:
  - id: echo
    engine: scripted
    script: {{reply: "one two three", token_delay: 0.05}}
  - id: slow
    engine: scripted
    script: {{reply: "one two three four five six", token_delay: 1.0}}  # 6 s in flight, even on a loaded machine
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from conftest import serving

    with serving(tmp_path_factory.mktemp("keys"), CONFIG) as process:
        yield process


def ask(gateway, protocol: str, key: str, stream: bool = False, model: str = "echo"):
    """One short chat through the protocol's official client; its raised error if refused."""
    if protocol == "openai":
        with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0) as client:
            answer = client.chat.completions.create(
                model=model, messages=HELLO, max_tokens=8, stream=stream
            )
            return list(answer) if stream else answer
    if protocol == "anthropic":
        with anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0) as client:
            answer = client.messages.create(
                model=model, messages=HELLO, max_tokens=8, stream=stream
            )
            return list(answer) if stream else answer
    with ollama.Client(host=gateway.url, headers={"authorization": f"Bearer {key}"}) as client:
        answer = client.chat(model=model, messages=HELLO, stream=stream)
        return list(answer) if stream else answer


def raw(gateway, protocol: str, key: str) -> httpx.Response:
    """One chat on the wire, for the headers of an answer that was not refused."""
    path = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "ollama": "/api/chat"}
    body = {"model": "echo", "messages": HELLO, "max_tokens": 8, "stream": False}
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(gateway.url + path[protocol], json=body, headers=headers, timeout=30)


def refusal(gateway, protocol: str, key: str) -> tuple[int, dict, Exception]:
    """A refused request through the official client (status, headers, the error)."""
    errors = {
        "openai": openai.RateLimitError,
        "anthropic": anthropic.RateLimitError,
        "ollama": ollama.ResponseError,
    }
    with pytest.raises(errors[protocol]) as refused:
        ask(gateway, protocol, key)
    error = refused.value
    if protocol == "ollama":  # its client keeps no headers: read them off the wire
        assert error.status_code == 429
        raw = httpx.post(
            f"{gateway.url}/api/chat",
            json={"model": "echo", "messages": HELLO, "stream": False},
            headers={"authorization": f"Bearer {key}"},
        )
        assert raw.status_code == 429 and set(raw.json()) == {"error"}
        return 429, raw.headers, error
    return error.status_code, error.response.headers, error


def assert_headers(protocol: str, headers, kind: str, limit: int) -> None:
    """The headers each protocol's clients read, with the limit that refused."""
    assert int(headers["retry-after"]) >= 1
    if protocol == "anthropic":
        assert headers[f"anthropic-ratelimit-{kind}-limit"] == str(limit)
        assert headers[f"anthropic-ratelimit-{kind}-remaining"] == "0"
        assert headers[f"anthropic-ratelimit-{kind}-reset"].endswith("Z")
    else:
        assert headers[f"x-ratelimit-limit-{kind}"] == str(limit)
        assert headers[f"x-ratelimit-remaining-{kind}"] == "0"
        assert headers[f"x-ratelimit-reset-{kind}"][-1] == "s"


def assert_limited_event(gateway, label: str, limit: str, key: str) -> None:
    event = gateway.wait_event("rate_limited", key_label=label)
    assert event["limit"] == limit
    assert key not in gateway.log.read_text()  # the label names it, never the key


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rpm_past_the_limit_is_the_protocols_429_with_its_headers(gateway, protocol):
    key = secret("rpm", protocol)
    first = raw(gateway, protocol, key)  # an answer says what is left, as the services do
    assert first.status_code == 200
    if protocol == "anthropic":
        assert first.headers["anthropic-ratelimit-requests-remaining"] == "1"
    else:
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
    ask(gateway, protocol, key)
    status, headers, error = refusal(gateway, protocol, key)
    assert status == 429 and "limits.rpm" in str(error)
    assert_headers(protocol, headers, "requests", 2)
    assert_limited_event(gateway, f"rpm-{protocol}", "rpm", key)
    ask(gateway, protocol, "sk-free-0123456789")  # nothing else slows down


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_tpm_counts_prompt_and_completion_tokens(gateway, protocol):
    key = secret("tpm", protocol)
    ask(gateway, protocol, key)  # the scripted prompt alone is past 40 byte tokens
    status, headers, error = refusal(gateway, protocol, key)
    assert status == 429 and "limits.tpm" in str(error)
    assert_headers(protocol, headers, "tokens", 40)
    assert_limited_event(gateway, f"tpm-{protocol}", "tpm", key)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_concurrent_refuses_while_one_is_in_flight_and_frees_when_it_ends(gateway, protocol):
    key = secret("concurrent", protocol)
    first = threading.Thread(target=ask, args=(gateway, protocol, key, True, "slow"))
    first.start()
    gateway.wait_event("request_queued", key_label=f"concurrent-{protocol}")  # in flight
    status, headers, error = refusal(gateway, protocol, key)
    assert status == 429 and "limits.concurrent" in str(error)
    assert int(headers["retry-after"]) >= 1
    assert_limited_event(gateway, f"concurrent-{protocol}", "concurrent", key)
    first.join()
    ask(gateway, protocol, key)  # its slot came back when the first ended


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_budget_refuses_until_its_period_renews(gateway, protocol):
    key = secret("budget", protocol)
    # Start just after a 4-second period begins, so the refusal below is in the same one.
    time.sleep(4 - time.time() % 4 + 0.05)
    ask(gateway, protocol, key)
    status, headers, error = refusal(gateway, protocol, key)
    assert status == 429 and "limits.budget" in str(error)
    assert_headers(protocol, headers, "tokens", 40)
    assert int(headers["retry-after"]) <= 4
    assert_limited_event(gateway, f"budget-{protocol}", "budget", key)
    time.sleep(int(headers["retry-after"]) + 0.1)
    ask(gateway, protocol, key)  # a new period: the budget is whole again


def test_a_malformed_priority_is_a_400_in_the_protocols_shape(gateway):
    key = {"authorization": "Bearer sk-free-0123456789", "x-gateway-priority": "high"}
    body = {"model": "echo", "messages": HELLO, "max_tokens": 4}
    answer = httpx.post(f"{gateway.url}/v1/messages", json=body, headers=key)
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert "x-gateway-priority" in answer.json()["error"]["message"]
