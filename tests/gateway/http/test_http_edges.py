"""The edges of the HTTP surface against a real `gateway serve`: paths no route matches,
methods a route lacks, admin routes without an admin key, cross-site requests."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import serving

KEY = "sk-edges-0123456789"
CONFIG = """
server:
  api_keys: ["${TEST_EDGES_KEY}"]
  cors_origins: ["https://chat.example.com"]
models:
  - id: echo
    engine: scripted
  - id: broken
    source: ./missing-model.gguf
"""
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    directory = tmp_path_factory.mktemp("http-edges")
    with serving(directory, CONFIG, env={"TEST_EDGES_KEY": KEY}) as process:
        yield process


@pytest.mark.parametrize(
    ("method", "path"), [("HEAD", "/"), ("GET", "/"), ("GET", "/nothing/here"), ("POST", "/v2")]
)
def test_a_path_no_route_matches_is_logged_and_carries_a_request_id(gateway, method, path):
    response = httpx.request(method, gateway.url + path, headers=AUTH)
    assert response.status_code == 404
    request_id = response.headers["x-request-id"]
    started = gateway.wait_event("request_started", request_id=request_id)
    assert (started["method"], started["path"]) == (method, path)
    finished = gateway.wait_event("request_finished", request_id=request_id)
    assert finished["status"] == 404


@pytest.mark.parametrize(
    "path", ["/admin/reload", "/admin/models/echo/load", "/admin/models/echo/unload"]
)
def test_api_keys_without_an_admin_key_close_the_admin_routes(gateway, path):
    for headers in ({}, AUTH):
        response = httpx.post(gateway.url + path, headers=headers)
        assert response.status_code == 403, response.text
        error = response.json()["error"]
        assert error["type"] == "permission_error"
        assert "set server.admin_key" in error["message"]
    assert httpx.get(f"{gateway.url}/health").json()["models"]["echo"]["state"] == "ready"


def test_serve_on_a_network_bind_with_keys_and_no_admin_key_says_so(tmp_path):
    with serving(tmp_path, CONFIG, env={"TEST_EDGES_KEY": KEY}, args=("--host", "0.0.0.0")) as gw:
        text = gw.log.read_text()
    assert "no server.admin_key: admin routes (/admin/reload, load, unload) answer 403" in text
    with serving(tmp_path, CONFIG, env={"TEST_EDGES_KEY": KEY}) as loopback:
        assert "server.admin_key" not in loopback.log.read_text()


JSON_ROUTES = {
    "/v1/chat/completions": {"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": "echo", "prompt": "hi"},
    "/v1/responses": {"model": "echo", "input": "hi"},
    "/v1/embeddings": {"model": "echo", "input": "hi"},
    "/v1/messages": {
        "model": "echo",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/v1/messages/count_tokens": {"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
    "/api/chat": {
        "model": "echo",
        "stream": False,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/api/generate": {"model": "echo", "stream": False, "prompt": "hi"},
    "/api/embed": {"model": "echo", "input": "hi"},
    "/api/show": {"model": "echo"},
}


def assert_envelope(path: str, response: httpx.Response, status: int, kind: str, words: str):
    assert response.status_code == status, (path, response.text)
    body = response.json()
    if path.startswith("/api/"):
        assert set(body) == {"error"} and words in body["error"], body
    elif path.startswith("/v1/messages"):
        assert body["type"] == "error" and body["error"]["type"] == kind, body
        assert words in body["error"]["message"], body
    else:
        assert body["error"]["type"] == kind and words in body["error"]["message"], body


@pytest.mark.parametrize("path", list(JSON_ROUTES))
def test_cross_site_requests_and_bodies_that_are_not_json_are_refused(gateway, path):
    body = json.dumps(JSON_ROUTES[path])
    url = gateway.url + path
    # What a page on another site can send without a preflight: text/plain, from its origin.
    for origin in ("https://evil.example", "null", "https://chat.example.com.evil.example"):
        headers = AUTH | {"origin": origin, "content-type": "text/plain"}
        answer = httpx.post(url, content=body, headers=headers)
        assert_envelope(path, answer, 403, "permission_error", "server.cors_origins")
    # Not JSON, from no browser at all: 415, before the body is read.
    for content_type in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ):
        headers = AUTH | {"content-type": content_type}
        answer = httpx.post(url, content=body, headers=headers)
        assert_envelope(
            path, answer, 415, "invalid_request_error", "content-type: application/json"
        )
    # No content-type at all (LiteLLM's Ollama provider; never a browser's body): JSON.
    answer = httpx.post(url, content=body, headers=AUTH | {"content-type": ""})
    assert answer.status_code == 415, (path, answer.text)
    answer = httpx.post(url, content=body, headers=AUTH)  # bytes: httpx declares no type
    assert answer.status_code not in (403, 415), (path, answer.text)
    # A listed origin, the gateway's own page, and plain clients are served.
    for extra in ({"origin": "https://chat.example.com"}, {"origin": gateway.url}, {}):
        headers = AUTH | extra | {"content-type": "application/json; charset=utf-8"}
        answer = httpx.post(url, content=body, headers=headers)
        assert answer.status_code not in (403, 415), (path, extra, answer.text)


def test_a_foreign_origin_reaches_no_route_at_all(gateway):
    for method, path in [("GET", "/v1/models"), ("POST", "/admin/reload"), ("GET", "/ui/state")]:
        answer = httpx.request(
            method, gateway.url + path, headers=AUTH | {"origin": "https://evil.example"}
        )
        assert answer.status_code == 403 and "cross-origin" in answer.text, (path, answer.text)


@pytest.mark.parametrize(
    ("path", "allowed"),
    [("/v1/chat/completions", "POST"), ("/v1/messages", "POST"), ("/api/chat", "POST"),
     ("/health", "GET"), ("/admin/reload", "POST")],
)  # fmt: skip
def test_a_method_the_route_lacks_is_a_405_naming_the_allowed_ones(gateway, path, allowed):
    method = "GET" if allowed == "POST" else "DELETE"
    response = httpx.request(method, gateway.url + path, headers=AUTH)
    assert response.status_code == 405, response.text
    assert allowed in response.headers["allow"]
    assert_envelope(path, response, 405, "invalid_request_error", "")


def test_a_model_that_failed_to_load_is_a_503_clients_do_not_retry_as_an_overload(gateway):
    chat = [{"role": "user", "content": "hi"}]
    answer = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers=AUTH,
        json={"model": "broken", "messages": chat},
    )
    assert_envelope("/v1/chat/completions", answer, 503, "server_error", "failed to load")
    body = {"model": "broken", "max_tokens": 5, "messages": chat}
    answer = httpx.post(f"{gateway.url}/v1/messages", headers=AUTH, json=body)
    assert_envelope("/v1/messages", answer, 503, "api_error", "failed to load")
    assert "retry-after" not in answer.headers


def test_a_reload_refused_for_a_corrupt_model_file_is_a_bad_request(start_gateway, tmp_path):
    gateway = start_gateway("models:\n  - id: echo\n    engine: scripted\n")
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF but not really a model")
    config = next(tmp_path.glob("models-*.yaml"))
    config.write_text(config.read_text() + f"  - id: corrupt\n    source: {corrupt}\n")
    answer = httpx.post(f"{gateway.url}/admin/reload")
    assert_envelope("/admin/reload", answer, 400, "invalid_request_error", "corrupt.gguf")
