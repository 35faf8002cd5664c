"""Without `server.admin_key`, admin routes answer only to a loopback peer of a loopback
bind: a gateway on 0.0.0.0 with no keys at all lets neither the network nor this machine
unload its models (a page in a browser here could, under a rebound name)."""

from __future__ import annotations

import socket

import httpx
import pytest

CONFIG = """
server: {allow_unauthenticated_network: true}
models:
  - {id: echo, engine: scripted, script: {reply: "hi"}}
"""


def network_address() -> str | None:
    """This machine's address on its network (no packet is sent), or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))
            address = sock.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def test_admin_routes_without_an_admin_key_answer_no_peer_of_a_network_bind(start_gateway):
    address = network_address()
    if address is None:
        pytest.skip("this machine has no network address to come from")
    gateway = start_gateway(CONFIG, args=("--host", "0.0.0.0"))
    remote = f"http://{address}:{gateway.port}"
    assert httpx.get(f"{remote}/v1/models", timeout=10).status_code == 200  # it is reachable
    for path in ("/admin/models/echo/unload", "/admin/models/echo/load", "/admin/reload"):
        answer = httpx.post(f"{remote}{path}", timeout=10)
        assert answer.status_code == 403, path
        assert "server.admin_key" in answer.json()["error"]["message"]
    local = httpx.post(f"{gateway.url}/admin/models/echo/unload", timeout=10)
    assert local.status_code == 403 and "server.admin_key" in local.json()["error"]["message"]
    assert gateway.events("model_detached") == []


def test_admin_routes_without_an_admin_key_answer_a_loopback_peer_of_a_loopback_bind(
    start_gateway,
):
    gateway = start_gateway(CONFIG)
    assert httpx.post(f"{gateway.url}/admin/models/echo/unload", timeout=10).status_code == 200
