"""`/ui/api/` over HTTP on a real gateway (scripted models): what each key sees, the
controls, cancelling, the benchmark, and the history kept across a restart."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest

from engines.cache.blockfile import write_block
from engines.cache.store import block_path
from gateway.control.key_names import SECRET_FILE, KeyNames

KEY, LIMITED, ADMIN = "sk-api-one-24681357", "sk-api-two-97531864", "adm-api-13572468"
CONFIG = """
server:
  api_keys: ["${TEST_KEY}", {key: "${TEST_LIMITED}", models: [echo]}]
  admin_key: ${TEST_ADMIN}
  state_dir: STATE
  activity: {max_rows: 500, max_age: 1h}
models:
  - id: echo
    engine: scripted
    aliases: [default]
    script: {reply: "one two three", token_delay: 0.01}
  - id: slow
    engine: scripted
    concurrency: 1
    residency: {on_demand: true, idle_ttl: 10m}
    script: {reply: "SLOW_REPLY", token_delay: 0.25}
"""
SLOW_REPLY = "a b c d e f g h i j k l m n o p q r s t"
CONFIG = CONFIG.replace("SLOW_REPLY", SLOW_REPLY)
ENV = {"TEST_KEY": KEY, "TEST_LIMITED": LIMITED, "TEST_ADMIN": ADMIN}


@pytest.fixture
def gateway(start_gateway, tmp_path):
    return start_gateway(CONFIG.replace("STATE", str(tmp_path / "state")), env=ENV)


def call(gateway, key: str, method: str, path: str, **kwargs) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", **kwargs.pop("headers", {})}
    return httpx.request(method, f"{gateway.url}{path}", headers=headers, timeout=30, **kwargs)


def chat(gateway, key: str, model: str = "default", **fields) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], **fields}
    answer = call(gateway, key, "POST", "/v1/chat/completions", json=body)
    return answer.headers["x-request-id"]


def rows(gateway, key: str, query: str = "") -> list[dict]:
    for _ in range(50):  # the store writes a moment after the answer
        found = call(gateway, key, "GET", f"/ui/api/activity{query}").json()["rows"]
        if found and all(r["status"] is not None for r in found):
            return found
        time.sleep(0.1)
    return found


def label_of(tmp_path, key: str) -> str:
    """The name a key without `label` goes by: a keyed hash, the secret in state_dir."""
    return KeyNames((tmp_path / "state" / SECRET_FILE).read_bytes()).label(key)


def test_each_key_sees_its_own_rows_and_the_admin_sees_all(gateway, tmp_path):
    mine = chat(gateway, KEY)
    theirs = chat(gateway, LIMITED, model="echo")
    refused = call(gateway, LIMITED, "POST", "/api/chat", json={"model": "slow", "messages": []})
    assert refused.status_code == 403
    every = rows(gateway, ADMIN)
    assert {r["request_id"] for r in every} >= {mine, theirs}
    row = next(r for r in every if r["request_id"] == mine)
    assert (row["key"], row["protocol"], row["requested"], row["model"]) == (
        label_of(tmp_path, KEY), "openai", "default", "echo",
    )  # fmt: skip
    [generated] = gateway.events("generated", request_id=mine)
    assert row["status"] == 200 and row["finish"] == "stop"
    assert (row["prompt_tokens"], row["new_tokens"]) == (
        generated["prompt_tokens"], generated["new_tokens"],
    )  # fmt: skip
    assert row["ttft_s"] is not None and row["decode_tps"] > 0

    limited = rows(gateway, LIMITED)
    assert {r["key"] for r in limited} == {label_of(tmp_path, LIMITED)}
    assert {r["status"] for r in limited} == {200, 403}
    assert [r["request_id"] for r in rows(gateway, ADMIN, "?status=403&protocol=ollama")] == [
        refused.headers["x-request-id"]
    ]
    # Another key's request is not found; its own opens with its whole trail.
    assert call(gateway, LIMITED, "GET", f"/ui/api/activity/{mine}").status_code == 404
    trail = call(gateway, KEY, "GET", f"/ui/api/activity/{mine}").json()["events"]
    assert [e["event"] for e in trail][0::4] == ["request_started", "request_finished"]
    assert "generated" in [e["event"] for e in trail]
    # A limited key sees its models only, and no controls.
    models = call(gateway, LIMITED, "GET", "/ui/api/models").json()
    assert models["viewer"] == {"admin": False, "key": label_of(tmp_path, LIMITED)}
    assert [m["id"] for m in models["models"]] == ["echo"]
    for method, path in [
        ("GET", "/ui/api/models/echo/settings"),
        ("GET", "/ui/api/models/echo/events"),
        ("GET", "/ui/api/reload"),
        ("POST", "/ui/api/reload"),
        ("POST", "/ui/api/models/echo/unload"),
        ("POST", "/ui/api/models/slow/pin"),
        ("POST", f"/ui/api/requests/{mine}/cancel"),
        ("POST", "/ui/api/benchmark"),
    ]:
        assert call(gateway, KEY, method, path).status_code in (401, 403), path
    assert call(gateway, "sk-nobody-12345678", "GET", "/ui/api/activity").status_code == 401
    assert KEY not in gateway.log.read_text() and ADMIN not in gateway.log.read_text()


def test_history_models_settings_and_model_events(gateway):
    for _ in range(3):
        chat(gateway, KEY)
    rows(gateway, ADMIN)
    plots = call(gateway, ADMIN, "GET", "/ui/api/history?window=1h").json()
    assert plots["step_s"] == 60 and len(plots["t"]) == 60
    echo = plots["models"]["echo"]
    assert round(sum(echo["requests_per_s"]) * 60) == 3
    assert call(gateway, ADMIN, "GET", "/ui/api/history?window=2h").status_code == 400
    settings = call(gateway, ADMIN, "GET", "/ui/api/models/echo/settings").json()
    assert settings["id"] == "echo" and settings["queue"]["max_wait"] == "120s"  # a default
    events = call(gateway, ADMIN, "GET", "/ui/api/models/echo/events").json()["events"]
    assert {"model_attached", "generated"} <= {e["event"] for e in events}
    after = events[-1]["id"]
    assert call(gateway, ADMIN, "GET", f"/ui/api/models/echo/events?after={after}").json() == {
        "model": "echo",
        "events": [],
    }


def test_pin_load_unload_and_reload_from_the_page_routes(gateway):
    pinned = call(gateway, ADMIN, "POST", "/ui/api/models/slow/pin").json()
    assert pinned == {"model": "slow", "pinned_now": True, "state": "ready"}
    slow = next(m for m in call(gateway, ADMIN, "GET", "/ui/api/models").json()["models"]
                if m["id"] == "slow")  # fmt: skip
    assert slow["pinned_now"] and slow["state"] == "loaded" and slow["unloads_in_s"] is None
    assert call(gateway, ADMIN, "POST", "/ui/api/models/echo/unpin").status_code == 400
    assert call(gateway, ADMIN, "POST", "/ui/api/models/slow/unpin").json()["pinned_now"] is False
    assert call(gateway, ADMIN, "POST", "/ui/api/models/slow/unload").json()["state"] == "unloaded"
    assert call(gateway, ADMIN, "POST", "/ui/api/models/slow/load").json()["state"] == "ready"
    diff = call(gateway, ADMIN, "POST", "/ui/api/reload").json()
    assert diff["unchanged"] == ["echo", "slow"]
    for _ in range(50):
        last = call(gateway, ADMIN, "GET", "/ui/api/reload").json()["last"]
        if last:
            break
        time.sleep(0.1)
    assert last["event"] == "config_reloaded" and last["trigger"] == "admin"


def _in_background(work) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(work()))
    thread.start()
    return thread, out


def _running(gateway, status_wanted=None) -> list[dict]:
    for _ in range(100):
        found = call(gateway, ADMIN, "GET", "/ui/api/activity?model=slow").json()["rows"]
        open_rows = [r for r in found if r["status"] is None]
        if len(open_rows) >= (status_wanted or 1):
            return open_rows
        time.sleep(0.05)
    raise AssertionError(f"no running request: {found}")


def test_cancel_a_running_and_a_queued_request(gateway):
    call(gateway, ADMIN, "POST", "/ui/api/models/slow/load")
    running, first = _in_background(lambda: call(
        gateway, KEY, "POST", "/v1/chat/completions",
        json={"model": "slow", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    ))  # fmt: skip
    _running(gateway)
    queued, second = _in_background(lambda: call(
        gateway, KEY, "POST", "/api/chat",
        json={"model": "slow", "messages": [{"role": "user", "content": "y"}]},
    ))  # fmt: skip
    open_rows = _running(gateway, 2)
    by_path = {r["path"]: r["request_id"] for r in open_rows}
    gateway.wait_event("request_queued", model="slow", request_id=by_path["/api/chat"])
    for path in ("/api/chat", "/v1/chat/completions"):
        answer = call(gateway, ADMIN, "POST", f"/ui/api/requests/{by_path[path]}/cancel")
        assert answer.json() == {"request_id": by_path[path], "cancelled": True}
    queued.join(10)
    running.join(10)
    assert second[0].status_code == 503
    assert "cancelled by the operator" in second[0].json()["error"]
    assert first[0].status_code == 200  # a stream already started ends early
    assert "data: [DONE]" not in first[0].text
    finished = {e["request_id"]: e for e in gateway.events("request_finished")}
    for rid in by_path.values():
        assert finished[rid]["status"] == 503
        assert finished[rid]["error"] == "cancelled by the operator (the ops page)"
    # The model's thread notices within a token, a moment after the answer ended.
    generated = gateway.wait_event("generated", request_id=by_path["/v1/chat/completions"])
    assert generated["new_tokens"] < len(SLOW_REPLY) and generated["stop_reason"] == "cancelled"
    unknown = call(gateway, ADMIN, "POST", "/ui/api/requests/req_nothing/cancel")
    assert unknown.status_code == 404


def test_the_benchmark_refuses_a_busy_model_unless_forced_and_keeps_results(gateway):
    ask = {"model": "echo", "prompt_tokens": 64, "max_tokens": 8, "streams": 3}
    result = call(gateway, ADMIN, "POST", "/ui/api/benchmark", json=ask).json()
    assert [run["streams"] for run in result["runs"]] == [1, 3]
    one, three = result["runs"]
    assert three["new_tokens"] == 3 * one["new_tokens"] and one["decode_tps"] > 0
    # The prompt is the size asked in the model's own tokens (the scripted engine counts
    # bytes), and a weightless model claims no prefill rate.
    assert 56 <= one["prompt_tokens"] <= 64 and three["prompt_tokens"] == one["prompt_tokens"]
    assert one["prefill_tps"] is None
    busy, _ = _in_background(lambda: chat(gateway, KEY, model="slow"))
    _running(gateway)
    slow = {**ask, "model": "slow", "streams": 1, "max_tokens": 2}
    refused = call(gateway, ADMIN, "POST", "/ui/api/benchmark", json=slow)
    assert refused.status_code == 409 and "force" in refused.json()["error"]["message"]
    forced = call(gateway, ADMIN, "POST", "/ui/api/benchmark", json={**slow, "force": True})
    assert forced.status_code == 200
    busy.join(30)
    runs = call(gateway, ADMIN, "GET", "/ui/api/benchmarks").json()["runs"]
    assert [run["model"] for run in runs] == ["slow", "echo"]
    assert runs[1]["settings"] == {**ask, "force": False}
    bad = call(gateway, ADMIN, "POST", "/ui/api/benchmark", json={**ask, "streams": 0})
    assert bad.status_code == 400


def test_the_history_outlives_the_process(start_gateway, tmp_path):
    config = CONFIG.replace("STATE", str(tmp_path / "state"))
    first = start_gateway(config, env=ENV)
    rid = chat(first, KEY)
    rows(first, ADMIN)
    first.stop()
    second = start_gateway(config, env=ENV)
    assert rid in [r["request_id"] for r in rows(second, ADMIN)]
    assert (tmp_path / "state" / "activity.sqlite3").exists()


def test_bodies_are_kept_only_for_a_model_with_capture_and_redacted(start_gateway, tmp_path):
    config = CONFIG.replace("STATE", str(tmp_path / "state")).replace(
        "    aliases: [default]\n", "    aliases: [default]\n    capture: true\n"
    )
    gateway = start_gateway(config, env=ENV)
    kept = chat(gateway, KEY, messages=[{"role": "user", "content": f"my key is {KEY}"}])
    streamed = call(
        gateway, KEY, "POST", "/v1/chat/completions",
        json={"model": "echo", "stream": True, "messages": [{"role": "user", "content": "s"}]},
    ).headers["x-request-id"]  # fmt: skip
    not_kept = chat(gateway, KEY, model="slow")
    rows(gateway, ADMIN)
    row = call(gateway, ADMIN, "GET", f"/ui/api/activity/{kept}").json()["row"]
    assert "my key is ***" in row["capture"]["request"] and KEY not in str(row)
    assert '"content":"one two three"' in row["capture"]["response"]
    stream = call(gateway, ADMIN, "GET", f"/ui/api/activity/{streamed}").json()["row"]
    assert stream["capture"]["response"].rstrip().endswith("data: [DONE]")
    other = call(gateway, ADMIN, "GET", f"/ui/api/activity/{not_kept}").json()["row"]
    assert other["capture"] is None
    for path in (tmp_path / "state").glob("activity.sqlite3*"):  # the WAL too
        assert KEY.encode() not in path.read_bytes()


def test_the_kv_cache_route_shows_the_disk_tier_to_the_admin(gateway, tmp_path):
    # A block as the disk tier writes it, in the directory `state_dir` puts the tier in.
    cache = tmp_path / "state" / "kv-cache"
    block = block_path(cache, "ab" * 20)
    block.parent.mkdir(parents=True)
    size = write_block(block, {"0.keys": ("F32", np.zeros((1, 1, 64, 4), np.float32))})
    chat(gateway, KEY)
    assert call(gateway, KEY, "GET", "/ui/api/cache").status_code == 403
    shown = call(gateway, ADMIN, "GET", "/ui/api/cache").json()
    assert shown["dir"] == str(cache) and shown["max_bytes"] > 0
    assert (shown["blocks"], shown["disk_bytes"]) == (1, size)
    assert (shown["evicted_blocks"], shown["evicted_bytes"]) == (0, 0)
    # A scripted model keeps no KV cache: no row (its request's miss would say nothing).
    assert shown["models"] == {}


def test_the_kv_cache_route_says_when_the_disk_tier_is_off(start_gateway, tmp_path):
    config = CONFIG.replace("  state_dir: STATE\n", "  cache: {max_bytes: 0}\n")
    gateway = start_gateway(config, env=ENV)
    shown = call(gateway, ADMIN, "GET", "/ui/api/cache").json()
    assert (shown["dir"], shown["max_bytes"], shown["blocks"], shown["models"]) == (None, 0, 0, {})


def test_requests_refused_for_want_of_a_key_are_no_rows_but_are_counted(gateway):
    mine = chat(gateway, KEY)
    hello = {"model": "echo", "messages": [{"role": "user", "content": "hi"}]}
    for i in range(12):  # anyone may send these: they must not push tenants' rows out
        headers = {"authorization": f"Bearer sk-wrong-{i:012d}"} if i % 2 else {}
        path = "/v1/chat/completions" if i % 3 else "/api/chat"
        answer = httpx.post(f"{gateway.url}{path}", json=hello, headers=headers, timeout=30)
        assert answer.status_code == 401
    chat(gateway, LIMITED, model="echo")  # a later row: the refused ones were written by now
    every = rows(gateway, ADMIN)
    assert mine in {r["request_id"] for r in every}
    assert len(every) == 2 and 401 not in {r["status"] for r in every}
    metrics = call(gateway, ADMIN, "GET", "/metrics").text
    assert 'gateway_requests_total{model="",status="401"} 12.0' in metrics


def test_a_huge_number_in_a_query_is_a_400_not_a_500(gateway):
    huge = "9" * 40
    for key, path in [
        (KEY, f"/ui/api/activity?status={huge}"),
        (ADMIN, f"/ui/api/activity?status=-{huge}"),
        (ADMIN, f"/ui/api/models/echo/events?after={huge}"),
    ]:
        answer = call(gateway, key, "GET", path)
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json()["error"]["type"] == "invalid_request_error"
    assert call(gateway, KEY, "GET", f"/ui/api/activity?before={huge}").status_code == 200
    assert gateway.events("request_failed") == [] and not [
        e for e in gateway.events() if e.get("level") == "error"
    ]


def test_the_benchmark_refuses_a_body_that_is_not_json_as_every_json_route_does(gateway):
    body = '{"model": "echo", "prompt_tokens": 8, "max_tokens": 2, "streams": 1}'
    for declared in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        answer = call(
            gateway, ADMIN, "POST", "/ui/api/benchmark", content=body,
            headers={"content-type": declared},
        )  # fmt: skip
        assert answer.status_code == 415, (declared, answer.text)
    assert gateway.events("generated") == []  # nothing ran
    answer = call(gateway, ADMIN, "POST", "/ui/api/benchmark", json={"model": "echo", "streams": 1,
                  "prompt_tokens": 8, "max_tokens": 2, "stremas": 2})  # fmt: skip
    assert answer.status_code == 400 and "stremas" in answer.text
    ok = call(gateway, ADMIN, "POST", "/ui/api/benchmark", content=body,
              headers={"content-type": "application/json"})  # fmt: skip
    assert ok.status_code == 200, ok.text
