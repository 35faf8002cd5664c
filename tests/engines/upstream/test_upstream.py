"""Engine upstream over real processes: two scripted gateways are the replicas, a third
gateway serves them as models. Protocol translation (Anthropic, Ollama, tools, reasoning),
least-in-flight balancing, policies, FIFO and 429 as for a local model, error envelopes;
then one replica is killed mid-traffic and started again.
"""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest
from conftest import GatewayProcess, free_port

WORDS = " ".join(f"w{i}" for i in range(16))
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
REPLICA = """
models:
  - {id: fast, engine: scripted, concurrency: 8, script: {reply: "hello from the replica"}}
  - {id: slow, engine: scripted, concurrency: 8, script: {reply: "WORDS", token_delay: 0.25}}
  - {id: medium, engine: scripted, concurrency: 8, script: {reply: "a b c d", token_delay: 0.5}}
  - {id: tools, engine: scripted, concurrency: 8, script: {reply: 'CALL'}}
  - {id: thinker, engine: scripted, concurrency: 8, script: {reply: "<think>pondering</think>42"}}
  - {id: single, engine: scripted, script: {reply: "x y z", token_delay: 0.6}}
""".replace("WORDS", WORDS).replace("CALL", CALL)
HELLO = [{"role": "user", "content": "hello"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def front_config(a: str, b: str, nowhere: str) -> str:
    fast = "check_interval: 300ms, cooldown: 500ms"
    return f"""
models:
  - {{id: far, engine: upstream, upstream: {{urls: [{a}, {b}], model: fast, {fast}}}}}
  - {{id: far-slow, engine: upstream, upstream: {{urls: [{a}, {b}], model: slow, {fast}}}}}
  - id: far-lazy
    engine: upstream
    upstream: {{urls: [{a}, {b}], model: fast, check_interval: 1h}}
  - id: far-tools
    engine: upstream
    aliases: [claude-far-tools]
    upstream: {{urls: [{a}], model: tools}}
  - {{id: far-think, engine: upstream, upstream: {{urls: [{a}], model: thinker}}}}
  - id: capped
    engine: upstream
    system: "You are terse."
    guardrails: {{max_output_tokens: 3}}
    upstream: {{urls: [{a}], model: fast}}
  - id: paced
    engine: upstream
    rate: {{max_tokens_per_sec: 5}}
    upstream: {{urls: [{a}], model: fast}}
  - id: narrow
    engine: upstream
    queue: {{max_depth: 1}}
    upstream: {{urls: [{a}], model: medium, max_in_flight: 1}}
  - id: local-narrow
    engine: scripted
    queue: {{max_depth: 1}}
    script: {{reply: "a b c d", token_delay: 0.5}}
  - {{id: nowhere, engine: upstream, upstream: {{urls: [{nowhere}], timeout: 2s}}}}
  - id: impatient
    engine: upstream
    upstream: {{urls: [{a}], model: single, timeout: 300ms, {fast}}}
"""


class Cluster:
    def __init__(self, directory) -> None:
        self.dir = directory
        (directory / "replica.yaml").write_text(REPLICA)
        self.ports = [free_port(), free_port()]
        self.replicas = [self.start_replica(i) for i in (0, 1)]
        for replica in self.replicas:
            replica.wait_ready()
        self.urls = [f"http://127.0.0.1:{p}/v1" for p in self.ports]
        config = directory / "front.yaml"
        config.write_text(front_config(*self.urls, f"http://127.0.0.1:{free_port()}"))
        self.front = GatewayProcess(config, directory / "front.jsonl")
        self.front.wait_ready()

    def start_replica(self, i: int, attempt: int = 0) -> GatewayProcess:
        log = self.dir / f"replica{i}-{attempt}.jsonl"
        return GatewayProcess(self.dir / "replica.yaml", log, port=self.ports[i])

    def stop(self) -> None:
        for gateway in (self.front, *self.replicas):
            gateway.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("upstream"))
    try:
        yield cluster
    finally:
        cluster.stop()


def chat(cluster: Cluster, model: str, **extra) -> httpx.Response:
    body = {"model": model, "messages": HELLO, **extra}
    return httpx.post(f"{cluster.front.url}/v1/chat/completions", json=body, timeout=60)


def stream_lines(url: str, body: dict, out: list, started: threading.Event | None = None):
    """Read one SSE answer into `out`; set `started` at the first text."""
    with httpx.stream("POST", url, json=body, timeout=60) as response:
        out.append(response.status_code)
        for line in response.iter_lines():
            if line.startswith("data: "):
                out.append(line[6:])
                if started is not None and '"content":"w' in line:
                    started.set()


def test_streams_to_every_protocol_with_the_replicas_usage(cluster):
    front = cluster.front
    chunks = list(
        front.openai().chat.completions.create(
            model="far",
            messages=HELLO,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "hello from the replica"
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 4
    usage = chunks[-1].usage
    assert usage.completion_tokens == len("hello from the replica")  # the replica's count
    message = front.anthropic().messages.create(model="far", max_tokens=64, messages=HELLO)
    assert message.content[0].text == "hello from the replica"
    assert message.usage.output_tokens == usage.completion_tokens
    with front.anthropic().messages.stream(model="far", max_tokens=64, messages=HELLO) as s:
        assert "".join(s.text_stream) == "hello from the replica"
    parts = list(front.ollama().chat(model="far", messages=HELLO, stream=True))
    assert "".join(p.message.content for p in parts) == "hello from the replica"
    assert parts[-1].done and parts[-1].eval_count == usage.completion_tokens
    generated = front.events("generated", model="far")
    assert generated and all(e["replica"] in cluster.urls for e in generated)
    assert generated[-1]["new_tokens"] == usage.completion_tokens


def test_tool_calls_and_reasoning_cross_protocols(cluster):
    front = cluster.front
    answer = chat(cluster, "far-tools", tools=TOOLS).json()
    call = answer["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert answer["choices"][0]["finish_reason"] == "tool_calls"
    tool = {
        "name": "get_weather",
        "description": "Weather in a city",
        "input_schema": TOOLS[0]["function"]["parameters"],
    }
    message = front.anthropic().messages.create(
        model="claude-far-tools", max_tokens=256, messages=HELLO, tools=[tool]
    )
    use = next(b for b in message.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    assert message.stop_reason == "tool_use"
    reply = front.ollama().chat(model="far-think", messages=HELLO, think=True)
    assert reply.message.thinking == "pondering" and reply.message.content == "42"
    hidden = front.ollama().chat(model="far-think", messages=HELLO, think=False)
    assert hidden.message.content == "42" and not hidden.message.thinking
    called = front.ollama().chat(model="far-tools", messages=HELLO, tools=TOOLS)
    function = called.message.tool_calls[0].function
    assert function.name == "get_weather" and function.arguments == {"city": "Paris"}
    thought = front.anthropic().messages.create(
        model="far-think",
        max_tokens=2048,
        messages=HELLO,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    blocks = {b.type: b for b in thought.content}
    assert blocks["thinking"].thinking == "pondering" and blocks["text"].text == "42"


def test_count_tokens_is_the_replicas_own_count(cluster):
    counted = cluster.front.anthropic().messages.count_tokens(model="far", messages=HELLO)
    assert counted.input_tokens == chat(cluster, "far").json()["usage"]["prompt_tokens"] > 10


def test_model_policies_apply_as_for_a_local_model(cluster):
    capped = chat(cluster, "capped", max_tokens=500).json()
    assert capped["choices"][0]["finish_reason"] == "length"  # guardrails.max_output_tokens
    assert capped["usage"]["completion_tokens"] <= 3
    plain = chat(cluster, "far").json()
    # The model's system prompt went upstream: the replica counted it in the prompt.
    assert capped["usage"]["prompt_tokens"] > plain["usage"]["prompt_tokens"] + 10
    # rate.max_tokens_per_sec paces the four chunks of the reply (and its end) at 5 a second.
    started = time.monotonic()
    paced = chat(cluster, "paced").json()
    assert paced["choices"][0]["message"]["content"] == "hello from the replica"
    assert time.monotonic() - started >= 0.6


def test_least_in_flight_spreads_concurrent_requests(cluster):
    results: list[list] = [[] for _ in range(4)]
    body = {"model": "far-slow", "messages": HELLO, "stream": True, "max_tokens": 4}
    url = f"{cluster.front.url}/v1/chat/completions"
    threads = [threading.Thread(target=stream_lines, args=(url, body, r)) for r in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(r[0] == 200 and r[-1] == "[DONE]" for r in results)
    served = [e["replica"] for e in cluster.front.events("generated", model="far-slow")]
    assert sorted(served[-4:]) == sorted(cluster.urls * 2)


def test_a_client_that_leaves_stops_the_replicas_generation(cluster):
    body = {"model": "far-slow", "messages": HELLO, "stream": True}
    with httpx.stream("POST", f"{cluster.front.url}/v1/chat/completions", json=body) as answer:
        next(line for line in answer.iter_lines() if '"content":"w' in line)
    # The front cancels its job and closes its stream to the replica, which stops too.
    cluster.front.wait_event("generated", model="far-slow", stop_reason="cancelled")
    deadline = time.monotonic() + 10
    while not any(
        r.events("generated", model="slow", stop_reason="cancelled") for r in cluster.replicas
    ):
        assert time.monotonic() < deadline, "the replica kept generating"
        time.sleep(0.05)


def test_fifo_and_429_as_for_a_local_model(cluster):
    def burst(model: str) -> list[tuple[int, float]]:
        outcomes: list[tuple[int, float]] = [(0, 0.0)] * 3

        def one(i: int) -> None:
            answer = chat(cluster, model)
            outcomes[i] = (answer.status_code, time.monotonic())
            if answer.status_code == 429:
                assert answer.headers["retry-after"]

        threads = []
        for i in range(3):
            queued = len(cluster.front.events("request_queued", model=model))
            threads.append(threading.Thread(target=one, args=(i,)))
            threads[-1].start()
            if i < 2:  # in line (or running) before the next one is sent
                deadline = time.monotonic() + 10
                while len(cluster.front.events("request_queued", model=model)) == queued:
                    assert time.monotonic() < deadline
                    time.sleep(0.02)
        for thread in threads:
            thread.join(60)
        return outcomes

    for model in ("narrow", "local-narrow"):
        (s1, t1), (s2, t2), (s3, _) = burst(model)
        assert (s1, s2, s3) == (200, 200, 429), model
        assert t1 < t2, model  # the queued one finished after the one ahead of it
    waits = [e["queue_wait_s"] for e in cluster.front.events("generated", model="narrow")]
    assert waits[-1] > 0.3  # the second waited for the first (max_in_flight 1)


def test_errors_in_each_protocols_envelope(cluster):
    front = cluster.front
    body = {"model": "nowhere", "messages": HELLO, "max_tokens": 8}
    openai = httpx.post(f"{front.url}/v1/chat/completions", json=body)
    anthropic = httpx.post(f"{front.url}/v1/messages", json=body)
    ollama = httpx.post(f"{front.url}/api/chat", json=body)
    assert openai.status_code == anthropic.status_code == ollama.status_code == 503
    assert openai.headers["retry-after"]
    assert "no upstream replica is healthy" in openai.json()["error"]["message"]
    assert anthropic.json()["type"] == "error"
    assert anthropic.json()["error"]["type"] == "overloaded_error"
    assert "no upstream replica" in ollama.json()["error"]
    down = front.events("replica_down", model="nowhere")
    assert down and down[0]["replica"].startswith("http://127.0.0.1:")


def test_timeouts_are_504_before_the_first_byte_and_in_stream_after(cluster):
    """The replica's `single` model takes one request at a time, 0.6 s between words; the
    front waits 300 ms at most for a byte."""
    front = cluster.front
    body = {"model": "single", "messages": HELLO}
    busy = threading.Thread(
        target=httpx.post, args=(f"{cluster.urls[0]}/chat/completions",), kwargs={"json": body}
    )
    busy.start()
    time.sleep(0.3)  # the replica's one slot is taken: the next request waits in its queue
    queued = httpx.post(
        f"{front.url}/v1/messages", json={**body, "model": "impatient", "max_tokens": 20}
    )
    assert queued.status_code == 504
    assert queued.json()["error"]["type"] == "api_error"
    assert "did not answer in time" in queued.json()["error"]["message"]
    busy.join(10)
    # Taken out of rotation by its timeout; probed back in once the cool-down is over.
    deadline = time.monotonic() + 10
    while len(front.events("replica_up", model="impatient")) < 2:
        assert time.monotonic() < deadline, "the replica was not probed back in"
        time.sleep(0.1)
    lines: list = []
    stream_lines(
        f"{front.url}/v1/chat/completions", {**body, "model": "impatient", "stream": True}, lines
    )
    assert lines[0] == 200 and lines[-1] != "[DONE]"  # "x" came, then nothing for 300 ms
    assert any('"content":"x"' in line for line in lines[1:])
    error = json.loads(lines[-1])["error"]
    assert "did not answer in time" in error["message"]
    failures = front.events("upstream_failed", model="impatient")
    assert [e["phase"] for e in failures] == ["before_first_byte", "mid_stream"]
    assert not any(e["failover"] for e in failures)  # its only replica


def test_a_replica_killed_mid_traffic(cluster):
    """Streams on the dead replica end with the in-stream error; streams on the other
    finish; requests not yet streaming fail over; the replica is probed back in."""
    front, dead = cluster.front, cluster.replicas[0]
    url = f"{front.url}/v1/chat/completions"
    body = {"model": "far-slow", "messages": HELLO, "stream": True}
    results: list[list] = [[] for _ in range(4)]
    started = [threading.Event() for _ in range(4)]
    threads = [
        threading.Thread(target=stream_lines, args=(url, body, r, s))
        for r, s in zip(results, started, strict=True)
    ]
    for thread in threads:
        thread.start()
    assert all(s.wait(30) for s in started)
    dead.process.send_signal(signal.SIGKILL)
    dead.process.wait(10)
    dead.stop()
    # Not yet streaming: far-lazy's pool (no health checks) still thinks the replica is up.
    lazy = [chat(cluster, "far-lazy") for _ in range(4)]
    # A model with no other replica: 503 with Retry-After (unreachable, or already out).
    alone = chat(cluster, "far-tools", tools=TOOLS)
    assert alone.status_code == 503 and int(alone.headers["retry-after"]) >= 1
    for thread in threads:
        thread.join(60)
    assert [r.status_code for r in lazy] == [200] * 4
    assert all(r.json()["choices"][0]["message"]["content"] for r in lazy)
    failover = front.events("upstream_failed", model="far-lazy")
    assert failover and failover[0]["phase"] == "before_first_byte" and failover[0]["failover"]
    assert failover[0]["replica"] == cluster.urls[0]
    broken = [r for r in results if r[-1] != "[DONE]"]
    whole = [r for r in results if r[-1] == "[DONE]"]
    assert len(broken) == 2 and len(whole) == 2
    for lines in broken:
        error = json.loads(lines[-1])["error"]
        assert error["type"] == "bad_gateway" or "upstream" in error["message"]
    mid = front.events("upstream_failed", model="far-slow", phase="mid_stream")
    assert len(mid) == 2 and {e["replica"] for e in mid} == {cluster.urls[0]}
    front.wait_event("replica_down", model="far", replica=cluster.urls[0], timeout=10)
    assert all(chat(cluster, "far").status_code == 200 for _ in range(3))

    ups = len(front.events("replica_up", model="far", replica=cluster.urls[0]))
    cluster.replicas[0] = cluster.start_replica(0, attempt=1)
    cluster.replicas[0].wait_ready()
    deadline = time.monotonic() + 15
    while len(front.events("replica_up", model="far", replica=cluster.urls[0])) == ups:
        assert time.monotonic() < deadline, "the restarted replica was not probed back in"
        time.sleep(0.1)
    for _ in range(4):
        assert chat(cluster, "far").status_code == 200
    served = [e["replica"] for e in front.events("generated", model="far")[-4:]]
    assert cluster.urls[0] in served and cluster.urls[1] in served
    metrics = httpx.get(f"{front.url}/metrics").text
    dead_url = cluster.urls[0]
    assert f'gateway_replica_up{{model="far",replica="{dead_url}"}} 1.0' in metrics
    assert 'gateway_replica_up{model="nowhere",replica=' in metrics
    mid_stream = f'model="far-slow",phase="mid_stream",replica="{dead_url}"'
    assert f"gateway_upstream_failures_total{{{mid_stream}}} 2.0" in metrics


def test_keys_on_both_sides(start_gateway):
    """The front's per-key auth applies before any upstream work; the front's key for the
    replica opens it, a wrong one is the gateway's fault (502), and no key reaches a log."""
    keys = {"REPLICA_KEY": "rk-upstream-secret-1", "K_FAR": "ck-far-only-2", "K_ALL": "ck-all-3"}
    replica = start_gateway(
        """
        server: {api_keys: ["${REPLICA_KEY}"]}
        models: [{id: fast, engine: scripted, script: {reply: "hello from the replica"}}]
        """,
        env=keys,
    )
    front = start_gateway(
        f"""
        server: {{api_keys: [{{key: "${{K_FAR}}", models: [far]}}, "${{K_ALL}}"]}}
        models:
          - id: far
            engine: upstream
            upstream: {{urls: ["{replica.url}/v1"], api_key: "${{REPLICA_KEY}}", model: fast}}
          - id: wrong
            engine: upstream
            upstream: {{urls: ["{replica.url}/v1"], api_key: "not-the-key", model: fast}}
        """,
        env=keys,
    )

    def ask(model: str, key: str | None) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}"} if key else {}
        body = {"model": model, "messages": HELLO}
        return httpx.post(f"{front.url}/v1/chat/completions", json=body, headers=headers)

    assert ask("far", None).status_code == 401
    assert ask("wrong", keys["K_FAR"]).status_code == 403  # a key limited to `far`
    answer = ask("far", keys["K_FAR"])
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == "hello from the replica"
    refused = ask("wrong", keys["K_ALL"])
    assert refused.status_code == 502 and "answered 401" in refused.json()["error"]["message"]
    failed = front.wait_event("upstream_failed", model="wrong")
    assert failed["status"] == 401 and failed["replica"] == f"{replica.url}/v1"
    for log in (front.log, replica.log):
        assert not any(secret in log.read_text() for secret in keys.values())
