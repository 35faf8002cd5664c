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
