"""Auth on the routed path, per-key models, exposure defaults, CORS, secrets and logs —
each against a real `gateway serve` process."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import anthropic
import httpx
import msgspec
import ollama
import openai
import pytest
from conftest import REPO, free_port, leaked_secrets, raw_http
from litestar import Router

from gateway.app import make_protocols
from gateway.control.config import parse_config
from gateway.http.exposure import bind_refusal, host_name, is_loopback
from gateway.logs.setup import PRESENTED, Redactor

KEY, OTHER_KEY, ADMIN = "sk-team-0123456789", "sk-echo-only-98765", "adm-secret-55555"
KEYED = """
server:
  api_keys: ["${TEST_API_KEY}", {key: "${TEST_ECHO_KEY}", models: [default]}]
  admin_key: ${TEST_ADMIN_KEY}
  fallback: other
models:
  - id: echo
    engine: scripted
    aliases: [default]
  - id: other
    engine: scripted
"""
KEYS_ENV = {"TEST_API_KEY": KEY, "TEST_ECHO_KEY": OTHER_KEY, "TEST_ADMIN_KEY": ADMIN}
HELLO = [{"role": "user", "content": "hello"}]


def every_route() -> list[tuple[str, str, dict]]:
    """(method, path, opt) of every route the gateway serves, path parameters filled in."""
    names = ["openai.chat", "openai.completions", "openai.responses", "openai.embeddings",
             "model_list", "anthropic.messages", "ollama.chat", "ollama.models", "ollama.pull",
             "ollama.embed", "ops.health", "ops.admin", "ops.metrics", "ops.ui"]  # fmt: skip
    found = set()
    for module in (importlib.import_module(f"gateway.{name}") for name in names):
        for item in getattr(module, "ROUTES", []):
            if isinstance(item, Router):  # the static files: a router of its own
                pairs = [(r.path, h, item.opt) for r in item.routes for h in r.route_handlers]
            else:
                pairs = [(path, item, {}) for path in item.paths]
            for path, handler, router_opt in pairs:
                path = path.replace("{model_id:str}", "echo").replace("{file_path:path}", "app.js")
                for method in handler.http_methods:
                    opt = {**router_opt, **handler.opt}
                    found.add((method, path, json.dumps(opt, sort_keys=True)))
    return [(m, p, json.loads(o)) for m, p, o in sorted(found)]


def assert_envelope(path: str, body: dict, kind: str) -> None:
    protocol = make_protocols().of(path).name
    if protocol == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == kind, body
    elif protocol == "ollama":
        assert set(body) == {"error"} and isinstance(body["error"], str), body
    else:
        assert body["error"]["type"] == kind, body


def test_every_route_but_health_and_the_page_needs_a_key(start_gateway):
    gateway = start_gateway(KEYED, env=KEYS_ENV)
    routes = every_route()
    assert len(routes) >= 20
    checked = 0
    for method, path, opt in routes:
        if opt.get("public"):
            continue  # /health, and /ui with its two static files: no data in them
        for headers in [{}, {"authorization": "Bearer wrong-key-1234"}, {"x-api-key": KEY[:-1]}]:
            response = httpx.request(method, gateway.url + path, headers=headers)
            assert response.status_code == 401, (method, path, response.text)
            assert_envelope(path, response.json(), "authentication_error")
            assert KEY not in response.text and "wrong-key-1234" not in response.text
        checked += 1
    assert checked >= 20
    assert httpx.get(f"{gateway.url}/health").status_code == 200
    assert httpx.get(f"{gateway.url}/ui").status_code == 200
    # API keys do not open admin routes; ops reads need the admin key once one is set.
    api = {"authorization": f"Bearer {KEY}"}
    assert httpx.post(f"{gateway.url}/admin/reload", headers=api).status_code == 401
    assert httpx.get(f"{gateway.url}/metrics", headers={"x-api-key": ADMIN}).status_code == 200
    assert httpx.get(f"{gateway.url}/ui/state", headers={"x-api-key": ADMIN}).status_code == 200
    assert httpx.get(f"{gateway.url}/ui/state", headers=api).status_code == 403


ODD_PATHS = [
    "//v1/models",
    "/v1//models",
    "/v1/models/",
    "/V1/models",
    "%2Fv1%2Fmodels",
    "/%2Fv1%2Fmodels",
    "/v1%2Fmodels",
    "/v1/models?x",
    "/v1/models?api_key=" + KEY,
    "/health/../v1/models",
    "/health/%2E%2E/v1/models",
    "/./v1/models",
    "/v1/models%00",
    "/v1/models;x",
    "/ui/static/../../v1/models",
    "/ui/static/%2E%2E%2Fui.py",
    "http://127.0.0.1/v1/models",
]


def test_odd_paths_and_host_tricks_never_reach_data_without_a_key(start_gateway):
    gateway = start_gateway(KEYED, env=KEYS_ENV)
    outcomes = {}
    for path in ODD_PATHS:
        head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        status, _, body = raw_http(gateway.port, head.encode())
        outcomes[path] = status
        # A target in neither origin nor absolute form is refused by the HTTP parser, before
        # any routing: a 400 in the error envelope.
        refused = (400,) if not path.startswith(("/", "http://")) else ()
        assert status in (401, 404, *refused), (path, status, body)
        assert b"echo" not in body and b'"data"' not in body, (path, body)
    # What routes with a key routes without one too, and gets the same guard: the decision
    # is made on the handler the router chose, whatever the spelling of the path.
    for path, status in outcomes.items():
        head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {KEY}\r\nConnection: close\r\n\r\n"
        keyed, _, _ = raw_http(gateway.port, head.encode())
        assert (keyed == 200) == (status == 401), (path, status, keyed)
    # Host and forwarding headers change nothing about the key check.
    for extra in [
        "Host: localhost\r\n",
        f"Host: localhost:{gateway.port}\r\n",
        "Host: [::1]\r\n",
        "Host: 127.0.0.1\r\nX-Forwarded-For: 127.0.0.1\r\nX-Forwarded-Host: localhost\r\n",
        "Host: 127.0.0.1\r\nX-Real-IP: 127.0.0.1\r\nX-Original-URL: /health\r\n",
        "Host: 127.0.0.1\r\nAuthorization: Basic " + KEY + "\r\n",
        "Host: 127.0.0.1\r\nAuthorization: Bearer\r\n",
    ]:
        status, _, body = raw_http(
            gateway.port, f"GET /v1/models HTTP/1.1\r\n{extra}Connection: close\r\n\r\n".encode()
        )
        assert status == 401, (extra, body)


def test_loopback_answers_only_to_loopback_host_names(start_gateway):
    gateway = start_gateway(
        """
        models:
          - id: echo
            engine: scripted
        """
    )
    for host in ["evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "0.0.0.0",
                 "attacker.test:80", "192.168.1.10"]:  # fmt: skip
        for method, path in [("GET", "/v1/models"), ("GET", "/api/tags"), ("GET", "/health"),
                             ("POST", "/v1/messages"), ("GET", "/nope")]:  # fmt: skip
            head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            status, _, body = raw_http(gateway.port, head.encode())
            if path == "/nope":
                assert status == 404, (host, path, status)  # no route, nothing to defend
                continue
            assert status == 403, (host, path, status, body)
            assert b"loopback" in body and b"echo" not in body
    for host in ["localhost", f"localhost:{gateway.port}", "127.0.0.1", "127.0.0.2:1",
                 "[::1]", f"[::1]:{gateway.port}", "LOCALHOST"]:  # fmt: skip
        head = f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        assert raw_http(gateway.port, head.encode())[0] == 200, host


def test_exposure_rules():
    assert all(map(is_loopback, ["localhost", "127.0.0.1", "127.9.9.9", "::1", "[::1]"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "localhost.evil", ""]))
    assert host_name("[::1]:8000") == "::1" and host_name("localhost:80") == "localhost"
    open_config = parse_config("models: [{id: e, engine: scripted}]", "m.yaml").server
    assert bind_refusal(open_config, "127.0.0.1") is None
    assert "allow_unauthenticated_network" in bind_refusal(open_config, "0.0.0.0")
    allowed = parse_config(
        "server: {allow_unauthenticated_network: true}\nmodels: [{id: e, engine: scripted}]",
        "m.yaml",
    ).server
    assert bind_refusal(allowed, "0.0.0.0") is None
    keyed = parse_config("server: {api_keys: [k]}\nmodels: [{id: e, engine: scripted}]", "m.yaml")
    assert bind_refusal(keyed.server, "0.0.0.0") is None
    for bad in ['"*"', '"https://*.example.com"', "https://x.example/path", "null"]:
        with pytest.raises(Exception, match="cors_origins"):
            parse_config(f"server: {{cors_origins: [{bad}]}}\nmodels: [{{id: e}}]", "m.yaml")


def test_serve_refuses_a_network_bind_without_keys(tmp_path, start_gateway):
    config = tmp_path / "open.yaml"
    config.write_text("models:\n  - id: echo\n    engine: scripted\n")
    port = str(free_port())
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--host", "0.0.0.0",
         "--port", port],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "refusing to listen on 0.0.0.0" in done.stderr
    assert "allow_unauthenticated_network" in done.stderr
    # With keys it serves, to the names it has (tests/gateway/http/test_network_bind.py).
    gateway = start_gateway(KEYED, env=KEYS_ENV, args=("--host", "0.0.0.0"))
    head = f"GET /v1/models HTTP/1.1\r\nHost: 10.0.0.7\r\nx-api-key: {KEY}\r\nConnection: close\r\n\r\n"
    assert raw_http(gateway.port, head.encode())[0] == 200


def test_a_key_may_be_limited_to_some_models(start_gateway):
    gateway = start_gateway(KEYED, env=KEYS_ENV)
    limited, full = gateway.openai(OTHER_KEY), gateway.openai(KEY)
    for name in ["echo", "default"]:  # the key lists the alias: the model it names is allowed
        assert limited.chat.completions.create(model=name, messages=HELLO).choices
    for name in ["other", "no-such-model"]:  # the second reaches `other` as the fallback
        with pytest.raises(openai.PermissionDeniedError) as denied:
            limited.chat.completions.create(model=name, messages=HELLO)
        assert denied.value.body["type"] == "permission_error"
        assert "may not use model" in denied.value.body["message"]
        assert full.chat.completions.create(model=name, messages=HELLO).choices
    claude = gateway.anthropic(OTHER_KEY)
    assert claude.messages.create(model="claude-echo", max_tokens=16, messages=HELLO).content
    with pytest.raises(anthropic.PermissionDeniedError) as denied:
        claude.messages.create(model="claude-other", max_tokens=16, messages=HELLO)
    assert denied.value.body["error"]["type"] == "permission_error"
    with pytest.raises(anthropic.PermissionDeniedError):
        claude.messages.count_tokens(model="other", messages=HELLO)
    client = ollama.Client(host=gateway.url, headers={"authorization": f"Bearer {OTHER_KEY}"})
    gateway.clients.append(client)
    assert client.chat(model="echo", messages=HELLO).message.content
    with pytest.raises(ollama.ResponseError) as denied:
        client.chat(model="other", messages=HELLO)
    assert denied.value.status_code == 403
    # The listings show a limited key only what it may use.
    assert {m.id for m in limited.models.list()} == {"echo", "default"}
    assert {m.id for m in full.models.list()} == {"echo", "default", "other"}
    assert {m.id for m in claude.models.list()} == {
        "echo",
        "claude-echo",
        "default",
        "claude-default",
    }
    assert {m.model for m in client.list().models} == {"echo", "default"}
    for path, body in [
        ("/v1/completions", {"model": "other", "prompt": "x"}),
        ("/v1/responses", {"model": "other", "input": "x"}),
        ("/api/generate", {"model": "other", "prompt": "x"}),
    ]:
        response = httpx.post(gateway.url + path, json=body, headers={"x-api-key": OTHER_KEY})
        assert response.status_code == 403, path
        assert_envelope(path, response.json(), "permission_error")


def test_config_refuses_a_key_naming_an_unknown_model():
    with pytest.raises(Exception, match=r"server.api_keys\[0\].models\[0\]: 'ghost' names no"):
        parse_config(
            "server: {api_keys: [{key: k, models: [ghost]}]}\nmodels: [{id: e, engine: scripted}]",
            "m.yaml",
        )


def test_secrets_never_reach_a_log_line_or_an_error_body(start_gateway, tmp_path):
    wrong = "sk-wrong-but-real-elsewhere-42"
    env = {**KEYS_ENV, "TEST_PATH_SECRET": "token-in-a-path-7777"}
    broken = "  - id: broken\n    engine: mlx\n    source: /nonexistent/${TEST_PATH_SECRET}/m\n"
    gateway = start_gateway(KEYED + broken, env=env)
    failed = gateway.wait_event("model_failed", model="broken")
    assert "***" in failed["error"] and env["TEST_PATH_SECRET"] not in failed["error"]
    # Keys sent as model names, and a wrong key sent as a key and as a model name.
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {KEY}"},
        json={"model": KEY, "messages": HELLO},
    )
    assert response.status_code == 200  # the unknown name goes to the fallback...
    routed = gateway.wait_event("request_routed", served="other")
    assert routed["requested"] == "***"  # ...and the log says so without the key
    response = httpx.post(f"{gateway.url}/v1/messages", headers={"x-api-key": wrong},
                          json={"model": wrong, "max_tokens": 5, "messages": HELLO})  # fmt: skip
    assert response.status_code == 401 and wrong not in response.text
    response = httpx.post(
        f"{gateway.url}/api/chat",
        headers={"x-api-key": OTHER_KEY},
        json={"model": ADMIN, "messages": HELLO, "stream": False},
    )
    assert response.status_code == 403 and ADMIN not in response.text
    assert "***" in response.json()["error"]
    # A reload refused for the missing source: its errors name the path, secret hidden.
    response = httpx.post(f"{gateway.url}/admin/reload", headers={"x-api-key": ADMIN})
    assert response.status_code == 400 and env["TEST_PATH_SECRET"] not in response.text
    assert "***" in gateway.wait_event("config_rejected")["errors"][0]
    text = gateway.log.read_text()
    for secret in [*env.values(), wrong]:
        assert secret not in text, secret
    assert leaked_secrets([(gateway.log, (wrong,))]) == []
    planted = tmp_path / "planted.jsonl"
    planted.write_text(f'{{"event": "x", "k": "{KEY}"}}\n')
    assert len(leaked_secrets([(planted, (KEY,))])) == 1  # the session check would catch it


def test_a_rendered_line_holds_no_secret_wherever_the_event_put_it():
    """The log renders a line first and walks its strings only when it may hold a secret:
    the look-over must see a secret however JSON wrote it, and the walk reach every string."""

    class Note(msgspec.Struct):
        text: str

    odd = 'sk-we"ird\\key-9999'  # JSON escapes its quote and backslash
    redactor = Redactor()
    redactor.secrets = lambda: ("sk-secret-123456", odd)
    token = PRESENTED.set(("wrong-key-presented",))
    try:
        lines = [
            redactor.line({"event": "x", "msg": "key SK-SECRET-123456 here"}),
            redactor.line({"event": "x", "deep": {"list": ["a", "sk-secret-123456"]}}),
            redactor.line({"event": "x", "note": Note(text="the sk-secret-123456")}),
            redactor.line({"event": "x", "quoted": f"an {odd} here"}),
            redactor.line({"event": "x", "header": "Authorization: BEARER abcdefghijklmnop"}),
            redactor.line({"event": "x", "echo": "it said wrong-key-presented"}),
        ]
    finally:
        PRESENTED.reset(token)
    for line in lines:
        assert "***" in line, line
        for secret in ("secret-123456", "key-9999", "abcdefghijklmnop", "wrong-key-presented"):
            assert secret not in line.lower(), line
        json.loads(line)
    assert json.loads(lines[2]) == {"event": "x", "note": {"text": "the ***"}}
    clean = {"event": "x", "n": 1, "text": "nothing to hide", "none": None}
    assert json.loads(redactor.line(clean)) == clean


def test_logs_are_json_lines_to_stdout_and_the_log_file_at_the_configured_level(
    start_gateway, tmp_path
):
    log_file = tmp_path / "gateway.jsonl"
    gateway = start_gateway(
        f"""
        server:
          log_file: {log_file}
          log_level: warning
        models:
          - id: echo
            engine: scripted
          - id: broken
            engine: mlx
            source: /nonexistent/model
        """
    )
    httpx.get(f"{gateway.url}/v1/models").raise_for_status()
    gateway.wait_event("model_failed", model="broken")
    stdout = [json.loads(line) for line in gateway.log.read_text().splitlines() if line]
    assert {event["level"] for event in stdout} <= {"warning", "error"}
    assert not [e for e in stdout if e["event"] in ("request_started", "server_started")]
    file_lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert file_lines == stdout and any(e["event"] == "model_failed" for e in file_lines)
    for event in stdout:
        assert {"event", "ts", "level"} <= set(event)


def test_cors_is_closed_unless_origins_are_listed(start_gateway):
    closed = start_gateway("models:\n  - id: echo\n    engine: scripted\n")
    listed = start_gateway(
        """
        server:
          cors_origins: ["https://chat.example.com"]
        models:
          - id: echo
            engine: scripted
        """
    )
    preflight = {"access-control-request-method": "POST",
                 "access-control-request-headers": "authorization, content-type"}  # fmt: skip
    for origin in ["https://evil.example", "null", "https://chat.example.com.evil.example"]:
        for gateway in (closed, listed):
            headers = {"origin": origin}
            answer = httpx.get(f"{gateway.url}/v1/models", headers=headers)
            assert "access-control-allow-origin" not in answer.headers, (origin, answer.headers)
            answer = httpx.options(
                f"{gateway.url}/v1/chat/completions", headers=headers | preflight
            )
            assert "access-control-allow-origin" not in answer.headers, (origin, answer.headers)
    allowed = {"origin": "https://chat.example.com"}
    answer = httpx.get(f"{listed.url}/v1/models", headers=allowed | {"cookie": "a=b"})
    assert answer.headers["access-control-allow-origin"] == "https://chat.example.com"
    assert "access-control-allow-credentials" not in answer.headers
    answer = httpx.options(f"{listed.url}/v1/chat/completions", headers=allowed | preflight)
    assert answer.status_code == 204
    assert answer.headers["access-control-allow-origin"] == "https://chat.example.com"
    assert "access-control-allow-credentials" not in answer.headers
    answer = httpx.get(f"{closed.url}/v1/models", headers=allowed)
    assert "access-control-allow-origin" not in answer.headers


OPS_KEY = "sk-ops-scraper-24680"
TENANTS = """
server:
  api_keys:
    - "${TEST_API_KEY}"
    - {key: "${TEST_ECHO_KEY}", models: [default]}
    - {key: "${TEST_OPS_KEY}", models: []}
models:
  - id: echo
    engine: scripted
    aliases: [default]
  - id: secret-model
    engine: scripted
"""


def test_a_limited_key_sees_only_its_own_models(start_gateway):
    """Another tenant's model is not found, not named in a 404, and the ops views (every
    model, every client's events) need more than a limited key."""
    gateway = start_gateway(TENANTS, env={**KEYS_ENV, "TEST_OPS_KEY": OPS_KEY})
    limited = {"authorization": f"Bearer {OTHER_KEY}"}
    full = {"authorization": f"Bearer {KEY}"}
    show = httpx.post(f"{gateway.url}/api/show", json={"model": "secret-model"}, headers=limited)
    assert show.status_code == 404, show.text
    assert "secret-model" not in show.json()["error"].replace("'secret-model' not found", "")
    assert (
        httpx.post(
            f"{gateway.url}/api/show", json={"model": "secret-model"}, headers=full
        ).status_code
        == 200
    )
    chat = {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}
    missing = httpx.post(f"{gateway.url}/v1/chat/completions", json=chat, headers=limited)
    assert missing.status_code == 404
    message = missing.json()["error"]["message"]
    assert "known models: default, echo" in message and "secret-model" not in message
    for path in ("/ui/state", "/metrics", "/ui/events"):
        for headers in (limited, full):  # a key that may use every model is no ops key
            refused = httpx.get(gateway.url + path, headers=headers)
            assert refused.status_code == 403, (path, refused.text)
            assert "secret-model" not in refused.text
    # With no admin key set, a key limited to no models reads them (a scraper's key).
    ops = {"authorization": f"Bearer {OPS_KEY}"}
    assert httpx.get(f"{gateway.url}/ui/state", headers=ops).status_code == 200
    assert "secret-model" in httpx.get(f"{gateway.url}/metrics", headers=ops).text
