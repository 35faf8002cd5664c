"""Request limits and per-model defaults, the same in all five adapters: bad numbers are 400s
naming the field in each protocol's envelope, n past guardrails.max_n, best_of and
logprobs asked wrongly are refused by name,
max_output_tokens caps silently, and `system` / `sampling` defaults apply everywhere."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import serving

CONFIG = """
defaults:
  sampling: {temperature: 0.5, top_p: 0.8}
models:
  - id: echo
    engine: scripted
  - id: gizmo
    engine: scripted
    system: "Your name is Gizmo."
    sampling: {temperature: 0.3}
    guardrails: {max_output_tokens: 64}
"""

HI = [{"role": "user", "content": "hi"}]
# adapter -> (route, a valid body, how a sampling field is nested, the envelope's message)
ADAPTERS = {
    "chat": ("/v1/chat/completions", {"messages": HI}, "$.{}", lambda b: b["error"]["message"]),
    "completions": ("/v1/completions", {"prompt": "hi"}, "$.{}", lambda b: b["error"]["message"]),
    "responses": ("/v1/responses", {"input": "hi"}, "$.{}", lambda b: b["error"]["message"]),
    "anthropic": (
        "/v1/messages",
        {"messages": HI, "max_tokens": 10},
        "$.{}",
        lambda b: b["type"] == "error" and b["error"]["message"],
    ),
    "ollama": (
        "/api/chat",
        {"messages": HI, "stream": False},
        "$.options.{}",
        lambda b: b["error"],
    ),
    "ollama-generate": (
        "/api/generate",
        {"prompt": "hi", "stream": False},
        "$.options.{}",
        lambda b: b["error"],
    ),
}
MAX_TOKENS = {
    "chat": "max_tokens",
    "completions": "max_tokens",
    "responses": "max_output_tokens",
    "anthropic": "max_tokens",
    "ollama": "num_predict",
    "ollama-generate": "num_predict",
}
# The same bad values sent to every adapter: (field, JSON text of the value).
BAD = [
    ("temperature", "NaN"),
    ("temperature", "Infinity"),
    ("temperature", "-Infinity"),
    ("temperature", "-0.5"),
    ("temperature", "7"),
    ("temperature", '"0.5"'),
    ("top_p", "0"),
    ("top_p", "1.5"),
    ("top_p", "NaN"),
    ("max_tokens", "-5"),
    ("max_tokens", "1e999"),
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("limits"), CONFIG) as process:
        yield process


def send(gateway, adapter: str, field: str, value: str) -> httpx.Response:
    """The adapter's valid body with `field` set to the raw JSON text `value`."""
    route, body, nesting, _ = ADAPTERS[adapter]
    body = {"model": "echo", **body}
    name = MAX_TOKENS[adapter] if field == "max_tokens" else field
    marker = "__VALUE__"
    if nesting.startswith("$.options"):
        body["options"] = {name: marker}
    else:
        body[name] = marker
    text = json.dumps(body).replace(f'"{marker}"', value)
    return httpx.post(
        gateway.url + route, content=text, headers={"content-type": "application/json"}
    )


@pytest.mark.parametrize("adapter", ADAPTERS)
@pytest.mark.parametrize(("field", "value"), BAD)
def test_bad_numbers_are_400s_naming_the_field_in_every_protocol(gateway, adapter, field, value):
    _, _, nesting, message_of = ADAPTERS[adapter]
    if adapter.startswith("ollama") and (field, value) == ("max_tokens", "-5"):
        value = "-7"  # Ollama's -1 and -2 mean "no limit" and "fill the context"
    response = send(gateway, adapter, field, value)
    assert response.status_code == 400, response.text
    name = MAX_TOKENS[adapter] if field == "max_tokens" else field
    assert nesting.format(name) in message_of(response.json())


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/v1/chat/completions", {"messages": HI, "n": 9}, "$.n"),
        ("/v1/completions", {"prompt": "hi", "n": 9}, "$.n"),
        ("/v1/completions", {"prompt": "hi", "best_of": 2}, "$.best_of"),
        ("/v1/chat/completions", {"messages": HI, "top_logprobs": 3}, "$.top_logprobs"),
        ("/v1/chat/completions", {"messages": HI, "top_logprobs": 30}, "$.top_logprobs"),
        ("/v1/completions", {"prompt": "hi", "logprobs": 9}, "$.logprobs"),
        ("/v1/responses", {"input": "hi", "top_logprobs": 2}, "$.top_logprobs"),
        ("/api/chat", {"messages": HI, "top_logprobs": 2}, "$.top_logprobs"),
        ("/api/generate", {"prompt": "hi", "top_logprobs": 30}, "$.top_logprobs"),
    ],
)
def test_n_and_logprobs_asked_wrongly_are_refused_by_name(gateway, route, body, field):
    response = httpx.post(gateway.url + route, json={"model": "echo", **body})
    assert response.status_code == 400
    assert field in response.text


def test_max_output_tokens_is_a_silent_cap(gateway):
    asked = {"model": "gizmo", "input": "hi", "max_output_tokens": 1000}
    capped = httpx.post(f"{gateway.url}/v1/responses", json=asked).json()
    assert capped["status"] == "completed" and capped["max_output_tokens"] == 64
    free = httpx.post(f"{gateway.url}/v1/responses", json=asked | {"model": "echo"}).json()
    assert free["max_output_tokens"] == 1000
    # Anthropic clients (Claude Code) ask for large budgets routinely: served, not refused.
    body = {"model": "gizmo", "messages": HI, "max_tokens": 32000}
    assert httpx.post(f"{gateway.url}/v1/messages", json=body).status_code == 200


def test_sampling_merges_request_over_model_over_file_defaults(gateway):
    def applied(model, **asked):
        body = {"model": model, "input": "hi", **asked}
        response = httpx.post(f"{gateway.url}/v1/responses", json=body).json()
        return response["temperature"], response["top_p"]

    assert applied("echo") == (0.5, 0.8)  # the file's defaults
    assert applied("gizmo") == (0.3, 0.8)  # the model's temperature, the file's top_p
    assert applied("gizmo", temperature=0.9, top_p=0.5) == (0.9, 0.5)  # the request's


def prompt_tokens(gateway, protocol: str, model: str, system: str | None) -> int:
    if protocol == "openai":
        messages = ([{"role": "system", "content": system}] if system else []) + HI
        body = {"model": model, "messages": messages}
        return httpx.post(f"{gateway.url}/v1/chat/completions", json=body).json()["usage"][
            "prompt_tokens"
        ]
    if protocol == "responses":
        body = {"model": model, "input": "hi"} | ({"instructions": system} if system else {})
        return httpx.post(f"{gateway.url}/v1/responses", json=body).json()["usage"]["input_tokens"]
    if protocol == "anthropic":
        body = {"model": model, "messages": HI, "max_tokens": 10}
        body |= {"system": system} if system else {}
        return httpx.post(f"{gateway.url}/v1/messages", json=body).json()["usage"]["input_tokens"]
    messages = ([{"role": "system", "content": system}] if system else []) + HI
    body = {"model": model, "messages": messages, "stream": False}
    return httpx.post(f"{gateway.url}/api/chat", json=body).json()["prompt_eval_count"]


@pytest.mark.parametrize("protocol", ["openai", "responses", "anthropic", "ollama"])
def test_the_models_system_prompt_applies_when_the_request_has_none(gateway, protocol):
    # The scripted models render the same template with the same tokenizer: equal counts
    # mean equal prompts.
    defaulted = prompt_tokens(gateway, protocol, "gizmo", None)
    assert defaulted == prompt_tokens(gateway, protocol, "echo", "Your name is Gizmo.")
    assert defaulted > prompt_tokens(gateway, protocol, "echo", None)
    # A request's own system prompt replaces the model's.
    own = prompt_tokens(gateway, protocol, "gizmo", "Be terse.")
    assert own == prompt_tokens(gateway, protocol, "echo", "Be terse.")
