"""What the key guard resolves rides on the canonical request (schemas/canonical.py
`Client`), not in a context variable: every protocol's adapter hands the runner a request
that carries the key's label and the priority it was given, and the tokens the request
spends are told to the key's limiter under that label."""

from __future__ import annotations

import contextlib

import httpx
import pytest

from engines.platform import PlatformPath
from gateway.app import create_app
from gateway.control.config import load_config
from schemas.canonical import Client
from schemas.config import KeyLimits

KEY = "sk-door-0123456789"
CONFIG = f"""
server:
  api_keys:
    - {{key: {KEY}, label: door, priority: {{default: 5, max: 10}}, limits: {{tpm: 100000}}}}
models:
  - id: echo
    engine: scripted
    script: {{reply: "hello from echo"}}
"""
OPEN = """
models:
  - id: echo
    engine: scripted
"""
HI = [{"role": "user", "content": "hi"}]
ASKS = [
    ("/v1/chat/completions", {"model": "echo", "messages": HI}),
    ("/v1/completions", {"model": "echo", "prompt": "hi"}),
    ("/v1/responses", {"model": "echo", "input": "hi", "store": False}),
    ("/v1/messages", {"model": "echo", "messages": HI, "max_tokens": 8}),
    ("/api/chat", {"model": "echo", "messages": HI, "stream": False}),
    ("/api/generate", {"model": "echo", "prompt": "hi", "stream": False}),
]
# In process (the rest of tests/gateway serves a real process, where litestar's warnings are
# not errors): its deprecation of inferred dependencies (`generation`) is not this test's.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:litestar")
PLATFORM = PlatformPath(device="cpu", blas="test", weights="test", why="a test")


def app_for(tmp_path, config: str):
    path = tmp_path / "models.yaml"
    path.write_text(config)
    return create_app(load_config(path), PLATFORM, path)


@contextlib.asynccontextmanager
async def serving(app):
    """The app on this test's own loop (its lifespan sets a signal handler: the main thread)."""
    async with app.lifespan():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            yield client


def submitted(app, monkeypatch) -> list:
    """The requests the model's runner is handed, as it is handed them."""
    runner = app.state.registry.current.runners["echo"]
    seen = []
    submit = runner.submit

    def watching(request):
        seen.append(request)
        return submit(request)

    monkeypatch.setattr(runner, "submit", watching)
    return seen


@pytest.mark.parametrize(("path", "body"), ASKS, ids=[p for p, _ in ASKS])
async def test_the_keys_label_and_priority_ride_on_the_request(tmp_path, monkeypatch, path, body):
    app = app_for(tmp_path, CONFIG)
    async with serving(app) as client:
        seen = submitted(app, monkeypatch)
        headers = {"authorization": f"Bearer {KEY}", "x-gateway-priority": "7"}
        answer = await client.post(path, json=body, headers=headers)
        assert answer.status_code in (200, 201), answer.text
        assert [r.client for r in seen] == [Client(key="door", priority=7)]


async def test_the_tokens_a_request_spends_reach_its_keys_limiter(tmp_path):
    app = app_for(tmp_path, CONFIG)
    async with serving(app) as client:
        path, body = ASKS[0]
        answer = await client.post(path, json=body, headers={"authorization": f"Bearer {KEY}"})
        assert answer.status_code == 200, answer.text
        _, tokens = app.state.limiter.allowances("door", KeyLimits(tpm=100000))
    assert tokens.remaining == 100000 - answer.json()["usage"]["total_tokens"]


async def test_without_keys_the_header_alone_sets_the_priority(tmp_path, monkeypatch):
    app = app_for(tmp_path, OPEN)
    async with serving(app) as client:
        seen = submitted(app, monkeypatch)
        asked = {"x-gateway-priority": "-3"}
        answer = await client.post(ASKS[0][0], json=ASKS[0][1], headers=asked)
        assert answer.status_code == 200, answer.text
        answer = await client.post(ASKS[0][0], json=ASKS[0][1])
        assert answer.status_code == 200, answer.text
    assert [r.client for r in seen] == [Client(priority=-3), Client()]
