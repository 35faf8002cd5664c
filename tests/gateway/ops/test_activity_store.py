"""The Activity store on its own: lines in, rows out, bounded by `server.activity`."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from engines.errors import ConfigInvalid
from gateway.control.config import parse_config
from gateway.ops.activity.history import history
from gateway.ops.activity.store import ActivityStore
from schemas.config import ActivityConfig


def _line(event: dict) -> str:
    return json.dumps(event, separators=(",", ":"))  # as the log renders its lines


def _ts(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _request(store: ActivityStore, rid: str, at: float, **generated) -> None:
    lines = [
        {"event": "request_started", "method": "POST", "path": "/v1/chat/completions"},
        {"event": "request_routed", "requested": "fast", "served": "m", "alias": "fast",
         "fallback": False, "stream": True, "protocol": "openai"},
        {"event": "generated", "model": "m", "prompt_tokens": 100, "new_tokens": 20,
         "prefill_s": 0.5, "decode_s": 2.0, "queue_wait_s": 0.1, "ttft_s": 0.6,
         "stop_reason": "stop", "reused_prefix_tokens": 50, **generated},
        {"event": "guardrail", "model": "m", "tool": "f", "problem": "p", "action": "repaired"},
        {"event": "request_finished", "status": 200, "duration_ms": 2700.0},
    ]  # fmt: skip
    for line in lines:
        store.tap(_line({"event": line.pop("event"), "ts": _ts(at), "request_id": rid} | line))


def test_a_request_becomes_one_row_with_its_trail_and_unknown_fields_in_detail():
    store = ActivityStore(None, ActivityConfig, lambda: "key-1")
    now = time.time()
    # `ram`/`disk` and `drafted_tokens` stand for fields other work adds to `generated`.
    _request(store, "req_a", now, ram=30, disk=20, drafted_tokens=12, session_evicted=False)
    store.tap(_line({"event": "request_started", "request_id": "req_ui", "path": "/ui/api/models"}))
    store.tap(_line({"event": "model_log", "model": "m", "stream": "stdout", "line": "hi"}))
    store.flush()
    [row] = store.activity({})
    assert row["request_id"] == "req_a" and row["key"] == "key-1"
    assert (row["requested"], row["model"], row["protocol"]) == ("fast", "m", "openai")
    assert (row["prompt_tokens"], row["cached_tokens"], row["new_tokens"]) == (100, 50, 20)
    assert row["prefill_tps"] == 100.0  # the 50 tokens not served from a cache, in 0.5 s
    assert row["decode_tps"] == 10.0
    assert (row["status"], row["finish"], row["guardrail"]) == (200, "stop", "repaired")
    assert row["detail"] == {"ram": 30, "disk": 20, "drafted_tokens": 12}
    row_again, trail = store.request("req_a")
    assert [e["event"] for e in trail] == [
        "request_started", "request_routed", "generated", "guardrail", "request_finished",
    ]  # fmt: skip
    assert store.request("req_ui") == (None, [])  # the page's own polling is no row
    assert [e["event"] for e in store.model_events("m")][-1] == "model_log"
    store.close()


def test_rows_past_max_rows_or_max_age_go_with_their_events():
    store = ActivityStore(None, lambda: ActivityConfig(max_rows=3, max_age="1h"), lambda: None)
    store.prune_every = 0
    now = time.time()
    _request(store, "req_old", now - 7200)  # past max_age
    for i in range(5):
        _request(store, f"req_{i}", now - 60 + i)
    store.flush()
    store.tap(_line({"event": "model_loading", "model": "m"}))  # one more write: a prune
    store.flush()
    kept = [row["request_id"] for row in store.activity({})]
    assert kept == ["req_4", "req_3", "req_2"]
    assert store.request("req_0")[1] == [] and store.request("req_old")[1] == []
    store.close()


def test_history_buckets_requests_per_model_and_errors_by_status():
    store = ActivityStore(None, ActivityConfig, lambda: None)
    now = time.time()
    _request(store, "req_1", now - 10)
    _request(store, "req_2", now - 10)
    store.tap(_line({"event": "request_started", "ts": _ts(now), "request_id": "req_3",
                          "path": "/api/chat"}))  # fmt: skip
    store.tap(_line({"event": "request_finished", "ts": _ts(now), "request_id": "req_3",
                          "status": 429, "duration_ms": 1.0}))  # fmt: skip
    store.sample(now, [("m", 3, 1, 1000)])
    store.flush()
    series = history(store, "5m", now=now)
    assert len(series["t"]) == 60 and series["step_s"] == 5
    model = series["models"]["m"]
    assert sum(model["requests_per_s"]) * 5 == 2
    assert sum(model["tokens_per_s"]) * 5 == 40
    assert [v for v in model["ttft_p95_s"] if v is not None] == [0.6]
    assert max(v or 0 for v in model["queue_depth"]) == 3
    assert sum(series["errors"]["429"]) == 1
    assert history(store, "5m", key="key-9", now=now)["models"] == {}  # another key's view
    store.close()


def test_server_activity_is_checked_with_its_line_and_column():
    text = "server:\n  activity: {max_rows: 0, max_age: 2d}\nmodels:\n  - id: e\n    engine: scripted\n"
    with pytest.raises(ConfigInvalid) as info:
        parse_config(text, "t.yaml", environ={})
    joined = "\n".join(info.value.errors)
    assert "t.yaml:2" in joined and "max_rows" in joined, joined
    config = parse_config(
        text.replace("max_rows: 0, max_age: 2d", "max_rows: 5"), "t.yaml", environ={}
    )
    assert config.server.activity == ActivityConfig(max_rows=5, max_age="168h")
