"""`GET /metrics`: Prometheus text that agrees with the event log, behind the key when keys
are set, and that never loads or wakes a model."""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

HELLO = [{"role": "user", "content": "hello"}]


def scrape(gateway, headers: dict | None = None) -> dict[tuple, float]:
    """{(sample name, sorted labels): value} of one scrape."""
    response = httpx.get(f"{gateway.url}/metrics", headers=headers or {})
    response.raise_for_status()
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_follow_the_events(start_gateway):
    gateway = start_gateway(
        """
        models:
          - id: echo
            engine: scripted
            aliases: [default]
            script: {reply: "one two three"}
        """
    )
    client = gateway.openai()
    for _ in range(3):
        client.chat.completions.create(model="default", messages=HELLO)
    stream = client.chat.completions.create(model="echo", messages=HELLO, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    httpx.post(f"{gateway.url}/v1/chat/completions", json={"model": "nope", "messages": HELLO})
    gateway.wait_event("request_finished", status=404)
    samples = scrape(gateway)
    generated = gateway.events("generated", model="echo")
    assert len(generated) == 4
    assert value(samples, "gateway_requests_total", model="echo", status="200") == 4
    assert value(samples, "gateway_requests_total", model="", status="404") == 1
    assert value(samples, "gateway_prompt_tokens_total", model="echo") == sum(
        e["prompt_tokens"] for e in generated
    )
    assert value(samples, "gateway_generated_tokens_total", model="echo") == sum(
        e["new_tokens"] for e in generated
    )
    assert value(samples, "gateway_time_to_first_token_seconds_count", model="echo") == 4
    assert value(samples, "gateway_request_duration_seconds_count", model="echo") == 4
    assert value(samples, "gateway_model_state", model="echo", state="loaded") == 1
    assert value(samples, "gateway_model_state", model="echo", state="unloaded") == 0
    assert value(samples, "gateway_queue_depth", model="echo") == 0
    assert value(samples, "gateway_running", model="echo") == 0
    assert value(samples, "gateway_draining") == 0
    assert not [name for name, _ in samples if name.endswith("_created")]


def test_reloads_are_counted(start_gateway):
    gateway = start_gateway("models:\n  - id: echo\n    engine: scripted\n")
    config = Path(gateway.process.args[gateway.process.args.index("--config") + 1])
    httpx.post(f"{gateway.url}/admin/reload").raise_for_status()
    config.write_text(config.read_text() + "  - id: echo\n    engine: scripted\n")  # a twin id
    assert httpx.post(f"{gateway.url}/admin/reload").status_code == 400
    samples = scrape(gateway)
    assert value(samples, "gateway_reloads_total", result="ok") == 1
    assert value(samples, "gateway_reloads_total", result="rejected") == 1


def test_reading_metrics_never_loads_or_wakes_a_model(start_gateway):
    gateway = start_gateway(
        """
        models:
          - id: sleeper
            engine: scripted
            residency: {on_demand: true, idle_ttl: 10m}
        """
    )
    for _ in range(5):
        samples = scrape(gateway)
        assert value(samples, "gateway_model_state", model="sleeper", state="unloaded") == 1
        httpx.get(f"{gateway.url}/ui/state").raise_for_status()
        httpx.get(f"{gateway.url}/health").raise_for_status()
    assert gateway.events("model_loading") == []
    assert httpx.get(f"{gateway.url}/health").json()["models"]["sleeper"]["state"] == "unloaded"
    # Once it has served (and loaded), it is reported loaded; scraping still moves nothing.
    gateway.openai().chat.completions.create(model="sleeper", messages=HELLO)
    samples = scrape(gateway)
    assert value(samples, "gateway_model_state", model="sleeper", state="loaded") == 1
    assert len(gateway.events("model_loading")) == 1


def test_metrics_need_a_key_when_keys_are_set(start_gateway):
    gateway = start_gateway(
        """
        server:
          api_keys: ["${TEST_METRICS_KEY}"]
          admin_key: ${TEST_METRICS_ADMIN_KEY}
        models:
          - id: echo
            engine: scripted
        """,
        env={"TEST_METRICS_KEY": "sk-metrics-1234567", "TEST_METRICS_ADMIN_KEY": "adm-987654321"},
    )
    answer = httpx.get(f"{gateway.url}/metrics")
    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "authentication_error"
    # Metrics show every model: once an admin key is set, they need it.
    api_key = httpx.get(
        f"{gateway.url}/metrics", headers={"authorization": "Bearer sk-metrics-1234567"}
    )
    assert api_key.status_code == 403
    assert scrape(gateway, {"x-api-key": "adm-987654321"})
