"""A gateway on a network address (`--host 0.0.0.0`) against DNS rebinding: it answers only
to the Host names it has (IP addresses, loopback names, `server.allowed_hosts`), and its
management and ops views need the admin key, even from a peer on this machine — a page in a
browser here reaches a network bind under a name of its own, from a loopback peer, with an
Origin that matches that name."""

from __future__ import annotations

import time

import httpx

OPEN = """
server:
  allow_unauthenticated_network: true
  allowed_hosts: [gw.example.com]
  state_dir: STATE
models:
  - {id: echo, engine: scripted, capture: true, script: {reply: "hi"}}
"""
ADMIN = "adm-network-7531975319"
HOSTED = {"TEST_ADMIN_KEY": ADMIN}
HELLO = {"model": "echo", "messages": [{"role": "user", "content": "my password is hunter2"}]}


def ask(gateway, method: str, path: str, host: str | None = None, key: str | None = None,
        **kwargs) -> httpx.Response:  # fmt: skip
    # As a browser sends them: the page's origin is the name it was reached by.
    headers = {"host": host, "origin": f"http://{host.lower()}"} if host else {}
    if key:
        headers["authorization"] = f"Bearer {key}"
    return httpx.request(method, f"{gateway.url}{path}", headers=headers, timeout=30, **kwargs)


def test_a_rebound_name_reaches_nothing_on_a_network_bind(start_gateway, tmp_path):
    gateway = start_gateway(OPEN.replace("STATE", str(tmp_path)), args=("--host", "0.0.0.0"))
    evil = f"evil.example:{gateway.port}"
    for method, path in [
        ("POST", "/admin/reload"),
        ("POST", "/admin/models/echo/unload"),
        ("GET", "/ui/api/activity"),
        ("GET", "/metrics"),
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
    ]:
        answer = ask(gateway, method, path, host=evil, json=HELLO)
        assert answer.status_code == 403, (path, answer.text)
        assert "server.allowed_hosts" in answer.json()["error"]["message"]
    assert gateway.events("model_detached") == [] and gateway.events("config_reloaded") == []
    # The names it has: loopback ones, any IP address, and those listed (in any case).
    for host in ["127.0.0.1", f"localhost:{gateway.port}", f"10.1.2.3:{gateway.port}",
                 "[fe80::1]", f"gw.example.com:{gateway.port}", "GW.Example.COM"]:  # fmt: skip
        assert ask(gateway, "GET", "/v1/models", host=host).status_code == 200, host


def test_management_and_ops_views_need_the_admin_key_on_a_network_bind(start_gateway, tmp_path):
    config = OPEN.replace("STATE", str(tmp_path))
    gateway = start_gateway(config, args=("--host", "0.0.0.0"))
    chat = ask(gateway, "POST", "/v1/chat/completions", json=HELLO)
    assert chat.status_code == 200  # the models are open, as allow_unauthenticated_network says
    # From this machine and by an honest name: still not the admin, with no admin key.
    for method, path in [("POST", "/admin/reload"), ("POST", "/admin/models/echo/unload"),
                         ("GET", "/metrics"), ("GET", "/ui/state"),
                         ("GET", "/ui/api/reload")]:  # fmt: skip
        answer = ask(gateway, method, path)
        assert answer.status_code == 403, (path, answer.text)
        assert "server.admin_key" in answer.json()["error"]["message"]
    time.sleep(1)  # the history is written a moment after the answer
    assert ask(gateway, "GET", "/ui/api/activity").json()["rows"] == []
    trail = ask(gateway, "GET", f"/ui/api/activity/{chat.headers['x-request-id']}")
    assert trail.status_code == 404 and "hunter2" not in trail.text
    assert ask(gateway, "GET", "/ui/api/models").json()["viewer"]["admin"] is False
    gateway.stop()

    keyed = config.replace("  state_dir:", "  admin_key: ${TEST_ADMIN_KEY}\n  state_dir:")
    gateway = start_gateway(keyed, env=HOSTED, args=("--host", "0.0.0.0"))
    assert ask(gateway, "POST", "/admin/reload").status_code == 401
    assert ask(gateway, "POST", "/admin/reload", key=ADMIN).status_code == 200
    assert ask(gateway, "GET", "/metrics", key=ADMIN).status_code == 200
    rows = ask(gateway, "GET", "/ui/api/activity", key=ADMIN).json()["rows"]
    assert chat.headers["x-request-id"] in {r["request_id"] for r in rows}


def test_serve_on_a_network_bind_without_an_admin_key_says_what_stays_closed(start_gateway):
    gateway = start_gateway(OPEN.replace("STATE", "state"), args=("--host", "0.0.0.0"))
    text = gateway.log.read_text()
    assert "without server.admin_key: admin routes" in text and "/metrics" in text
