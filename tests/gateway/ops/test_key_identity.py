"""A key's identity follows the key, not its place in `server.api_keys`: its Activity rows,
captured bodies and spent budget stay its own when other keys are added or removed, a removed
key's rows are the admin's alone, and the label a key without `label` goes by is a keyed hash
of it (the secret in `state_dir`), never the key and never its position."""

from __future__ import annotations

import re
import stat
import time

import httpx

K0, K1, K2 = "sk-zero-1357924680", "sk-one-2468013579", "sk-two-9753108642"
ADMIN = "adm-ident-86420975"
ENV = {"TEST_K0": K0, "TEST_K1": K1, "TEST_K2": K2, "TEST_ADMIN_KEY": ADMIN}
KEYS = {
    "zero": '    - "${TEST_K0}"\n',
    "one": '    - {key: "${TEST_K1}", limits: {budget: {tokens: 30, period: 24h}}}\n',
    "two": '    - "${TEST_K2}"\n',
}
CONFIG = """
server:
  admin_key: ${TEST_ADMIN_KEY}
  state_dir: STATE
  api_keys:
KEYS
models:
  - id: echo
    engine: scripted
    capture: true
    script: {reply: "one two three four five", token_delay: 0.001}
"""


def config(tmp_path, *names: str) -> str:
    keys = "".join(KEYS[name] for name in names)
    return CONFIG.replace("STATE", str(tmp_path / "state")).replace("KEYS\n", keys)


def call(gateway, key: str, method: str, path: str, **kwargs) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.request(method, f"{gateway.url}{path}", headers=headers, timeout=30, **kwargs)


def chat(gateway, key: str, text: str = "hi") -> httpx.Response:
    body = {"model": "echo", "messages": [{"role": "user", "content": text}]}
    return call(gateway, key, "POST", "/v1/chat/completions", json=body)


def rows(gateway, key: str, wanted: int = 0) -> list[dict]:
    for _ in range(50):  # the store writes a moment after the answer
        found = call(gateway, key, "GET", "/ui/api/activity").json()["rows"]
        if len(found) >= wanted and all(r["status"] is not None for r in found):
            return found
        time.sleep(0.1)
    return found


def reload(gateway, path, text: str) -> None:
    path.write_text(text)
    answer = call(gateway, ADMIN, "POST", "/admin/reload")
    assert answer.status_code == 200, answer.text


def test_a_keys_rows_captures_and_budget_stay_its_own_when_another_key_is_removed(
    start_gateway, tmp_path
):
    gateway = start_gateway(config(tmp_path, "zero", "one", "two"), env=ENV)
    path = tmp_path / "models-0.yaml"
    spent = []
    for _ in range(10):  # K1 chats until its budget is spent
        answer = chat(gateway, K1, "my password is hunter2-hunter2")
        if answer.status_code == 429:
            break
        assert answer.status_code == 200, answer.text
        spent.append(answer.headers["x-request-id"])
    assert spent and answer.status_code == 429
    chat(gateway, K2)
    before = rows(gateway, ADMIN, wanted=len(spent) + 2)
    labels = {r["request_id"]: r["key"] for r in before}
    one = labels[spent[0]]
    # The label is the key's own: not its place, not the key, the same for each of its rows.
    assert {labels[rid] for rid in spent} == {one}
    assert re.fullmatch(r"key:[0-9a-f]{16}", one), one
    assert all(K1 not in str(r) and "api_keys[" not in str(r["key"]) for r in before)

    reload(gateway, path, config(tmp_path, "one", "two"))  # K0's line goes
    assert chat(gateway, K1).status_code == 429  # its budget is still spent
    theirs = rows(gateway, K2, wanted=1)
    assert theirs and not {r["request_id"] for r in theirs} & set(spent)
    trail = call(gateway, K2, "GET", f"/ui/api/activity/{spent[0]}")
    assert trail.status_code == 404 and "hunter2" not in trail.text
    mine = rows(gateway, K1, wanted=len(spent))
    assert set(spent) <= {r["request_id"] for r in mine}
    own = call(gateway, K1, "GET", f"/ui/api/activity/{spent[0]}").json()["row"]
    assert "hunter2" in own["capture"]["request"]

    reload(gateway, path, config(tmp_path, "zero", "two"))  # K1 goes: its rows, the admin's
    assert not {r["request_id"] for r in rows(gateway, K2, wanted=1)} & set(spent)
    assert not {r["request_id"] for r in rows(gateway, K0)} & set(spent)
    kept = call(gateway, ADMIN, "GET", f"/ui/api/activity/{spent[0]}").json()["row"]
    assert kept["key"] == one and "hunter2" in kept["capture"]["request"]
    metrics = call(gateway, ADMIN, "GET", "/metrics").text
    assert f'key="{one}"' in metrics and K1 not in metrics


def test_a_keys_label_outlives_a_restart_and_its_secret_file_is_private(start_gateway, tmp_path):
    first = start_gateway(config(tmp_path, "zero", "two"), env=ENV)
    rid = chat(first, K2).headers["x-request-id"]
    label = next(r["key"] for r in rows(first, ADMIN, wanted=1) if r["request_id"] == rid)
    first.stop()
    secret = tmp_path / "state" / "key-labels.secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert K2.encode() not in secret.read_bytes()
    second = start_gateway(config(tmp_path, "two"), env=ENV)  # K0 gone, K2 now first
    assert rid in {r["request_id"] for r in rows(second, K2, wanted=1)}
    chat(second, K2)
    second.wait_event("request_finished", key_label=label)  # its events name it the same
