"""hf: models in a real gateway: download on first use with progress, served from the cache
after a restart, failures that stay their model's own, offline, and Ollama's /api/pull."""

from __future__ import annotations

import hashlib
import os
import shutil
import textwrap
import threading
import time
from datetime import datetime

import httpx
import ollama
import pytest
from hub_server import FakeHub, Repo, smollm2_files

A, B = "a" * 40, "b" * 40
TOKEN = "hf_gatedtoken_0123456789"
HELLO = [{"role": "user", "content": "hi"}]
CLEAN = {"HF_TOKEN": "", "HF_HUB_CACHE": "", "HF_HUB_OFFLINE": ""}
ECHO = """
  - id: echo
    engine: scripted
"""  # a model of models: at two spaces


def yaml(config: str, echo: str) -> str:
    """`config` (indented any way) with the scripted `echo` model added to its models."""
    return textwrap.dedent(config).rstrip() + echo


@pytest.fixture(scope="module")
def hub():
    files, gguf = smollm2_files()
    repos = {
        "org/smol": Repo({A: dict(files), B: {**files, "smol.Q4_1.gguf": gguf}}, {"main": B}),
        "org/gated": Repo({A: dict(files)}, {"main": A}, gated_tokens={TOKEN}),
    }
    # Slow enough that a download spans several seconds of progress events.
    with FakeHub(repos, rate=25e6) as server:
        yield server


@pytest.fixture
def env(hub, tmp_path):
    hub.requests.clear()
    # Whatever the machine sets, these tests own the cache, the endpoint, token and mode.
    return {"HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": hub.url, **CLEAN}


def chat(gateway, model):
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": model, "messages": HELLO, "max_tokens": 3},
        timeout=300,
    )


def when(event) -> float:
    return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()


def test_first_use_downloads_with_progress_then_a_restart_needs_no_request(
    hub, env, start_gateway
) -> None:
    on_demand = """
        models:
          - id: smol
            source: hf:org/smol
            residency: {on_demand: true}
    """
    gateway = start_gateway(yaml(on_demand, ECHO), env)
    assert hub.requests == []  # an on-demand model downloads at first use, not at start
    answers = []
    asking = threading.Thread(target=lambda: answers.append(chat(gateway, "smol")))
    asking.start()
    seen, ui = set(), None
    while asking.is_alive() and "loaded" not in seen:
        health = httpx.get(f"{gateway.url}/health").json()["models"]["smol"]
        seen.add(health["state"])
        if health["state"] == "downloading":
            assert health["download"]["file"] and health["download"]["done"] >= 0
            ui = ui or httpx.get(f"{gateway.url}/ui/state").json()
        time.sleep(0.1)
    asking.join()
    assert answers[0].status_code == 200 and "downloading" in seen
    assert {"file", "done", "total", "rate"} <= set(
        next(m for m in ui["models"] if m["id"] == "smol")["download"]
    )

    progress = gateway.events("model_downloading", model="smol")
    weights = [e for e in progress if e["file"] == "model.safetensors"]
    assert len(weights) >= 2 and weights[-1]["total"] == 98421374
    assert [e["done"] for e in weights] == sorted(e["done"] for e in weights)
    assert all(e["rate"] > 0 for e in weights[1:])
    gaps = [when(b) - when(a) for a, b in zip(progress, progress[1:], strict=False)]
    assert min(gaps) >= 0.95  # at most one a second per model
    done = gateway.wait_event("model_downloaded", model="smol")
    assert (done["revision"], done["commit"]) == ("main", B) and done["bytes"] > 98421374
    attached = gateway.wait_event("model_attached", model="smol")["detail"]
    assert (attached["revision"], attached["commit"]) == ("main", B)
    metrics = httpx.get(f"{gateway.url}/metrics").text.splitlines()
    counted = next(
        m for m in metrics if m.startswith('gateway_model_download_bytes_total{model="smol"}')
    )
    assert float(counted.split()[-1]) == done["bytes"]
    gateway.stop()

    hub.requests.clear()  # a restart, now pinned: straight from the cache
    pinned = start_gateway(yaml(on_demand.replace("residency: {on_demand: true}", ""), ECHO), env)
    assert chat(pinned, "smol").status_code == 200
    assert hub.requests == [] and not pinned.events("model_downloading")


def test_failed_downloads_fail_their_own_model_and_the_rest_serve(hub, env, start_gateway) -> None:
    gateway = start_gateway(
        yaml(
            """
            models:
              - id: gated
                source: hf:org/gated
              - id: allowed
                source: hf:org/gated
                hf_token: ${HF_GATED_TOKEN}
                residency: {on_demand: true}
              - id: missing
                source: hf:org/missing
            """,
            ECHO,
        ),
        {**env, "HF_GATED_TOKEN": "hf_wrong_token_000000"},
    )
    failed = {e["model"]: e["error"] for e in gateway.events("model_failed")}
    assert "401 gated repository" in failed["gated"]
    assert "404 repository not found" in failed["missing"]
    health = httpx.get(f"{gateway.url}/health").json()["models"]
    assert health["gated"]["state"] == "failed" and "gated" in health["gated"]["error"]
    reply = chat(gateway, "allowed")
    assert reply.status_code == 503 and "403 gated repository" in reply.text
    with pytest.raises(ollama.ResponseError) as whole:
        gateway.ollama().pull("allowed")
    assert whole.value.status_code == 502 and "403 gated repository" in whole.value.error
    with pytest.raises(ollama.ResponseError, match="403 gated repository"):
        list(gateway.ollama().pull("allowed", stream=True))  # the stream's {"error"} line
    assert chat(gateway, "echo").status_code == 200


def test_offline_fails_at_once_and_says_to_pull(hub, env, start_gateway) -> None:
    for server, extra in [("server: {offline: true}", {}), ("", {"HF_HUB_OFFLINE": "1"})]:
        gateway = start_gateway(
            yaml(
                f"""
                {server}
                models:
                  - id: smol
                    source: hf:org/smol
                """,
                ECHO,
            ),
            {**env, **extra},
        )
        error = gateway.wait_event("model_failed", model="smol")["error"]
        assert "offline" in error and "gateway pull" in error
        assert chat(gateway, "echo").status_code == 200
        gateway.stop()
    assert hub.requests == []


def test_api_pull_streams_the_download_through_the_ollama_client(hub, env, start_gateway) -> None:
    gateway = start_gateway(
        yaml(
            f"""
            models:
              - id: smol
                source: hf:org/smol
                residency: {{on_demand: true}}
              - id: smol-a
                source: hf:org/smol@{A}
                residency: {{on_demand: true}}
              - id: gated
                source: hf:org/gated
                residency: {{on_demand: true}}
            """,
            ECHO,
        ),
        {**env, "HF_TOKEN": TOKEN},  # read by huggingface_hub itself; never logged
    )
    client = gateway.ollama()
    lines = list(client.pull("smol", stream=True))
    assert lines[0].status == "pulling manifest" and lines[-1].status == "success"
    weights = [p for p in lines if p.status == "downloading model.safetensors"]
    assert len(weights) >= 3 and weights[-1].completed == weights[-1].total == 98421374
    assert any(0 < p.completed < p.total for p in weights)
    weights_sha = hashlib.sha256(smollm2_files()[0]["model.safetensors"].read_bytes()).hexdigest()
    assert {p.digest for p in weights} == {f"sha256:{weights_sha}"}  # a bar per digest
    assert f"resolved main to {B}" in [p.status for p in lines]

    with pytest.raises(ollama.ResponseError) as refused:
        client.pull("llama3.2")  # not in the YAML: the file is the registry
    assert refused.value.status_code == 404 and "not declared" in refused.value.error
    assert client.pull("smol-a").status == "success"  # the pinned commit
    assert client.pull("gated").status == "success"  # HF_TOKEN opened the gated repository

    tags = {m["name"]: m for m in httpx.get(f"{gateway.url}/api/tags").json()["models"]}
    assert tags["smol"]["revision"] == B and tags["smol"]["size"] > 98421374
    assert tags["smol-a"]["revision"] == A and tags["echo"]["size"] == 0
    info = client.show("smol-a").modelinfo
    assert (info["general.revision"], info["general.commit"]) == (A, A)
    hub.requests.clear()
    assert chat(gateway, "smol").status_code == 200 and hub.requests == []  # pulled: no fetch


def test_the_ops_page_shows_a_download_as_a_progress_bar_and_shutdown_stops_it(
    hub, env, start_gateway
) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(chromium):
        pytest.skip("chromium is not installed (./setup.sh test installs it)")
    from playwright.sync_api import expect, sync_playwright

    gateway = start_gateway(
        yaml(
            """
            server: {shutdown_grace: 1s}
            models:
              - id: smol
                source: hf:org/smol
                residency: {on_demand: true}
            """,
            ECHO,
        ),
        env,
    )
    hub.rate = 6e6  # about 16 s for the weights: the page polls every 2 s
    try:
        threading.Thread(target=chat, args=(gateway, "smol"), daemon=True).start()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page()
            page.goto(f"{gateway.url}/ui")
            bar = page.locator('tr[data-model="smol"] .download progress')
            expect(bar).to_be_visible(timeout=20_000)
            expect(page.locator('tr[data-model="smol"] .state')).to_contain_text("downloading")
            expect(page.locator('tr[data-model="smol"] .download span')).to_contain_text("MB/s")
            assert float(bar.get_attribute("max")) > 0
            browser.close()
        started = time.monotonic()  # SIGTERM mid-download: the transfer is abandoned
        gateway.stop()
        assert time.monotonic() - started < 15
        assert "download stopped" in gateway.wait_event("model_failed", model="smol")["error"]
        assert not gateway.events("model_downloaded")
    finally:
        hub.rate = 25e6


def test_a_pinned_model_at_a_commit_downloads_before_ready(hub, env, start_gateway) -> None:
    gateway = start_gateway(
        yaml(f"models:\n  - id: smol\n    source: hf:org/smol@{A}\n", ECHO), env
    )
    # Ready means loaded: the download happened before /health first answered.
    assert httpx.get(f"{gateway.url}/health").json()["models"]["smol"]["state"] == "ready"
    assert gateway.events("model_downloading", model="smol")
    attached = gateway.wait_event("model_attached", model="smol")["detail"]
    assert (attached["revision"], attached["commit"]) == (A, A) and A in attached["path"]
    # Nothing resolved: the Hub is asked about the commit itself, never a branch.
    assert not any(p.endswith("/revision/main") for _, p, _ in hub.requests)
    assert chat(gateway, "smol").status_code == 200


def test_a_model_that_failed_its_download_serves_after_a_pull(hub, env, start_gateway) -> None:
    gateway = start_gateway(yaml("models:\n  - id: late\n    source: hf:org/late\n", ECHO), env)
    assert "404" in gateway.wait_event("model_failed", model="late")["error"]
    assert chat(gateway, "late").status_code == 503
    hub.repos["org/late"] = hub.repos["org/smol"]  # published on the Hub meanwhile
    try:
        assert gateway.ollama().pull("late").status == "success"
        assert chat(gateway, "late").status_code == 200
    finally:
        del hub.repos["org/late"]
