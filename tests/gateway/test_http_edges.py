"""The edges of the HTTP surface against a real `gateway serve`: paths no route matches,
methods a route lacks, admin routes without an admin key, cross-site requests."""

from __future__ import annotations

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
