"""Usage per key on a real `gateway serve`: the key's label in the request's events, the
/metrics counters per label and model equal to the `generated` events' sums, and a reload
retuning a key's limits while its requests run."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter

import httpx
from conftest import serving

HELLO = [{"role": "user", "content": "hello there"}]
ADMIN = "adm-secret-0123456789"
TEAM, BOT = "sk-team-0123456789", "sk-bot-0123456789"


def config(concurrent: int) -> str:
    return f"""
server:
  admin_key: {ADMIN}
  api_keys:
    - {{key: {TEAM}, label: team, limits: {{concurrent: {concurrent}}}}}
    - {{key: {BOT}, label: bot, models: [echo]}}
models:
  - id: echo
    engine: scripted
    script: {{reply: "one two three"}}
  - id: slow
    engine: scripted
    script: {{reply: "one two three four five six", token_delay: 0.3}}
"""


def post(gateway, path: str, key: str, body: dict) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(f"{gateway.url}{path}", json=body, headers=headers, timeout=60)


def streamed_text(answer: httpx.Response) -> str:
    chunks = [
        json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: {")
    ]
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def scrape(gateway, name: str) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{gateway.url}/metrics", headers={"x-api-key": ADMIN}).text
    pattern = rf'^{name}_total{{key="([^"]*)",model="([^"]*)"}} (\S+)$'
    return {(k, m): float(v) for k, m, v in re.findall(pattern, text, re.MULTILINE)}


def test_usage_counters_equal_the_sum_of_generated_events(tmp_path):
    with serving(tmp_path, config(4)) as gateway:
        chat = {"model": "echo", "messages": HELLO, "max_tokens": 16}
        assert post(gateway, "/v1/chat/completions", TEAM, chat).status_code == 200
        assert post(gateway, "/v1/chat/completions", TEAM, {**chat, "n": 2}).status_code == 200
        streamed = post(gateway, "/v1/messages", BOT, {**chat, "stream": True})
        assert streamed.status_code == 200
        ollama = {"model": "echo", "messages": HELLO, "stream": False}
        assert post(gateway, "/api/chat", BOT, ollama).status_code == 200
        assert post(gateway, "/api/chat", TEAM, {**ollama, "model": "slow"}).status_code == 200
        refused = post(gateway, "/api/chat", BOT, {**ollama, "model": "slow"})
        assert refused.status_code == 403  # bot may use echo only: an error, counted

        generated = gateway.events("generated")
        assert {e["key_label"] for e in generated} == {"team", "bot"}
        prompt, made = Counter(), Counter()
        for event in generated:
            prompt[event["key_label"], event["model"]] += event["prompt_tokens"]
            made[event["key_label"], event["model"]] += event["new_tokens"]
        assert scrape(gateway, "gateway_key_prompt_tokens") == prompt
        assert scrape(gateway, "gateway_key_generated_tokens") == made
        assert scrape(gateway, "gateway_key_requests") == {
            ("team", "echo"): 2, ("team", "slow"): 1, ("bot", "echo"): 2, ("bot", ""): 1,
        }  # fmt: skip
        assert scrape(gateway, "gateway_key_errors") == {("bot", ""): 1}
        finished = gateway.events("request_finished", key_label="bot")
        assert [e["status"] for e in finished] == [200, 200, 403]
        log = gateway.log.read_text()
        assert TEAM not in log and BOT not in log


def test_a_reload_retunes_a_keys_limits_under_load_without_dropping_requests(tmp_path):
    with serving(tmp_path, config(1)) as gateway:
        slow = {"model": "slow", "messages": HELLO, "max_tokens": 64, "stream": True}
        running: list[httpx.Response] = []
        first = threading.Thread(
            target=lambda: running.append(post(gateway, "/v1/chat/completions", TEAM, slow))
        )
        first.start()
        gateway.wait_event("request_queued", key_label="team")
        refused = post(gateway, "/v1/chat/completions", TEAM, slow)
        assert refused.status_code == 429 and "limits.concurrent 1" in refused.text

        (tmp_path / "models.yaml").write_text(config(3))
        reloaded = httpx.post(f"{gateway.url}/admin/reload", headers={"x-api-key": ADMIN})
        assert reloaded.status_code == 200, reloaded.text
        more: list[httpx.Response] = []
        threads = [
            threading.Thread(
                target=lambda: more.append(post(gateway, "/v1/chat/completions", TEAM, slow))
            )
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        first.join()
        assert [r.status_code for r in running + more] == [200] * 3
        assert streamed_text(running[0]) == "one two three four five six"
        # The first was in flight across the reload, and finished whole.
        lines = [(e["event"], e.get("request_id")) for e in gateway.events()]
        first_id = running[0].headers["x-request-id"]
        reload_at = [name for name, _ in lines].index("config_reloaded")
        assert lines.index(("request_finished", first_id)) > reload_at
        assert post(gateway, "/v1/chat/completions", TEAM, slow).status_code == 200
