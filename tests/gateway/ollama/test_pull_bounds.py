"""`POST /api/pull` against a hostile or broken Hub and hostile clients: pulls run in a small
pool of their own, a pull whose client left stops, and only the admin moves a branch."""

from __future__ import annotations

import os
import threading
import time

import httpx
import pytest
from hub_server import FakeHub, Repo, smollm2_files

A, B = "a" * 40, "b" * 40
CLEAN = {"HF_TOKEN": "", "HF_HUB_CACHE": "", "HF_HUB_OFFLINE": ""}
HELLO = [{"role": "user", "content": "hi"}]
MODELS = """
models:
  - id: smol
    source: hf:org/smol
    residency: {on_demand: true}
  - id: echo
    engine: scripted
"""
# More pulls than asyncio's default executor has threads: were the pulls on it, they would
# take every one.
PULLS = max(8, min(32, (os.cpu_count() or 1) + 4) + 1)


@pytest.fixture
def hub():
    files, _ = smollm2_files()
    with FakeHub({"org/smol": Repo({A: dict(files), B: dict(files)}, {"main": A})}) as server:
        yield server


@pytest.fixture
def env(hub, tmp_path):
    return {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url, **CLEAN}


def abandoned_pull(url: str, headers: dict[str, str] | None = None) -> int:
    """Start a streamed pull, read at most its first line, and leave."""
    with httpx.stream("POST", f"{url}/api/pull", json={"model": "smol"}, headers=headers,
                      timeout=30) as reply:  # fmt: skip
        for _ in reply.iter_lines():
            break
        return reply.status_code


def test_pulls_stalled_on_the_hub_leave_count_tokens_and_reload_answering(
    hub, env, start_gateway
) -> None:
    gateway = start_gateway(MODELS, env)
    hub.stall()  # the Hub takes connections and never answers
    try:
        statuses: list[int] = []
        pulls = [
            threading.Thread(target=lambda: statuses.append(abandoned_pull(gateway.url)))
            for _ in range(PULLS)
        ]
        for pull in pulls:
            pull.start()
        for pull in pulls:
            pull.join(30)
        assert len(statuses) == PULLS
        time.sleep(1)  # the pulls that got a slot are now waiting on the Hub

        started = time.monotonic()
        counted = httpx.post(
            f"{gateway.url}/v1/messages/count_tokens",
            json={"model": "echo", "messages": HELLO},
            timeout=10,
        )
        assert counted.status_code == 200 and counted.json()["input_tokens"] > 0
        reloaded = httpx.post(f"{gateway.url}/admin/reload", timeout=10)
        assert reloaded.status_code == 200
        assert time.monotonic() - started < 5
        assert 1 <= len(hub.requests) <= 2  # two slots: the rest never reached the Hub
        refused = [s for s in statuses if s != 200]
        assert refused and set(refused) == {429}

        busy = httpx.post(f"{gateway.url}/api/pull", json={"model": "smol"}, timeout=10)
        assert busy.status_code == 429 and int(busy.headers["retry-after"]) >= 1
        assert "pulls" in busy.json()["error"]
    finally:
        hub.release()


@pytest.mark.parametrize("stream", [True, False])
def test_a_pull_whose_client_left_stops_downloading(hub, env, start_gateway, stream) -> None:
    gateway = start_gateway(MODELS, env)
    hub.rate = 1e6  # the weights take about 100 seconds
    body = {"model": "smol", "stream": stream}
    if stream:
        with httpx.stream("POST", f"{gateway.url}/api/pull", json=body, timeout=30) as reply:
            for line in reply.iter_lines():
                if "downloading model.safetensors" in line:
                    break  # the weights are coming: leave
    else:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes
            httpx.post(f"{gateway.url}/api/pull", json=body, timeout=6)
    deadline = time.monotonic() + 10
    while not hub.abandoned:  # the file in flight when the client left
        assert time.monotonic() < deadline, "the download went on after its client left"
        time.sleep(0.1)
    asked = len(hub.file_requests())
    time.sleep(1)
    assert len(hub.file_requests()) == asked  # and nothing more was asked for

    hub.rate = None  # its slot is free again: the next pull finishes
    whole = httpx.post(f"{gateway.url}/api/pull", json={"model": "smol", "stream": False},
                       timeout=120)  # fmt: skip
    assert whole.status_code == 200 and whole.json()["status"] == "success"


def test_only_the_admin_key_moves_a_branch_to_its_newest_commit(hub, env, start_gateway) -> None:
    keys = {"Authorization": "Bearer sk-plain-0123456789"}
    admin = {"Authorization": "Bearer sk-admin-0123456789"}
    gateway = start_gateway(
        "server:\n  api_keys: [sk-plain-0123456789]\n  admin_key: sk-admin-0123456789\n" + MODELS,
        env,
    )

    def pull(headers: dict[str, str]) -> list[str]:
        reply = httpx.post(f"{gateway.url}/api/pull", json={"model": "smol"}, headers=headers,
                           timeout=120)  # fmt: skip
        assert reply.status_code == 200, reply.text
        return [line for line in reply.text.splitlines() if "resolved" in line]

    assert pull(keys) == [f'{{"status":"resolved main to {A}"}}']  # not cached: fetched
    hub.repos["org/smol"].branches["main"] = B  # a new commit on the branch
    hub.requests.clear()
    assert pull(keys) == [f'{{"status":"resolved main to {A}"}}']  # what the model serves
    assert hub.requests == []  # the Hub was not even asked
    tags = {
        m["name"]: m for m in httpx.get(f"{gateway.url}/api/tags", headers=keys).json()["models"]
    }
    assert tags["smol"]["revision"] == A

    assert pull(admin) == [f'{{"status":"resolved main to {B}"}}']  # the admin moves it
    tags = {
        m["name"]: m for m in httpx.get(f"{gateway.url}/api/tags", headers=keys).json()["models"]
    }
    assert tags["smol"]["revision"] == B
