"""Ollama's `keep_alive` and `options`, honoured or refused by name, on a real gateway."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import httpx
import ollama
import pytest
from conftest import serving

CONFIG = """
models:
  - id: echo
    engine: scripted
    script: {reply: "hello from echo, a reply of some length"}
  - id: lazy
    engine: scripted
    residency: {on_demand: true, idle_ttl: 10m}
"""
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("ollama-options"), CONFIG) as process:
        yield process


@pytest.fixture(scope="module")
def client(gateway):
    client = gateway.ollama()
    yield client
    client.close()


def state(gateway, model: str) -> str:
    return httpx.get(f"{gateway.url}/health").json()["models"][model]["state"]


def expiry(client, model: str) -> datetime | None:
    found = [m for m in client.ps().models if m.model == model]
    return found[0].expires_at if found else None


def wait_for(condition, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.05)


def test_keep_alive_sets_how_long_an_on_demand_model_stays(gateway, client):
    client.chat(model="lazy", messages=HELLO, keep_alive="1h")
    left = (expiry(client, "lazy") - datetime.now(UTC)).total_seconds()
    assert 3500 < left <= 3600  # not the config's 10m
    client.chat(model="lazy", messages=HELLO, keep_alive=-1)
    assert expiry(client, "lazy").year > 2100  # stays: shown as Ollama shows keep_alive -1
    client.chat(model="lazy", messages=HELLO)  # no keep_alive: the config's idle_ttl again
    left = (expiry(client, "lazy") - datetime.now(UTC)).total_seconds()
    assert 500 < left <= 600


def test_keep_alive_zero_unloads_right_after_the_answer(gateway, client):
    reply = client.generate(model="lazy", prompt="hi", keep_alive=0)
    assert reply.response.startswith("hello")
    wait_for(lambda: state(gateway, "lazy") == "unloaded")
    assert gateway.wait_event("model_detached", model="lazy")["reason"] == "idle"


def test_an_empty_request_with_keep_alive_zero_is_ollama_stop(gateway, client):
    assert client.generate(model="lazy", prompt="", keep_alive="5m").done_reason == "load"
    assert state(gateway, "lazy") == "ready"
    stopped = client.generate(model="lazy", prompt="", keep_alive=0)
    assert stopped.done_reason == "unload" and state(gateway, "lazy") == "unloaded"


def test_pinned_models_ignore_keep_alive_and_ps_says_so(gateway, client):
    client.chat(model="echo", messages=HELLO, keep_alive=0)
    time.sleep(0.3)
    assert state(gateway, "echo") == "ready"
    listed = httpx.get(f"{gateway.url}/api/ps").json()["models"]
    echo = next(m for m in listed if m["model"] == "echo")
    assert echo["pinned"] is True and echo["expires_at"].startswith("2318")


def test_a_bad_keep_alive_is_refused_by_name(gateway):
    body = {"model": "lazy", "messages": HELLO, "keep_alive": "5 minutes", "stream": False}
    response = httpx.post(f"{gateway.url}/api/chat", json=body)
    assert response.status_code == 400 and "$.keep_alive" in response.json()["error"]


def test_num_ctx_is_the_requests_own_window(gateway, client):
    whole = client.chat(model="echo", messages=HELLO, options={"num_ctx": 100_000})
    assert whole.done_reason == "stop"  # wider than the model's: the model's window
    prompt = whole.prompt_eval_count
    cut = client.chat(model="echo", messages=HELLO, options={"num_ctx": prompt + 8})
    assert cut.done_reason == "length" and cut.eval_count <= 8
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model="echo", messages=HELLO, options={"num_ctx": prompt - 1})
    assert refused.value.status_code == 400
    assert (
        f"the prompt has {prompt} tokens and the context window is {prompt - 1} "
        "(options.num_ctx)" in str(refused.value)
    )


def test_options_the_gateway_does_not_apply_are_refused_by_name(gateway, client):
    with pytest.raises(ollama.ResponseError, match=r"\$.options.mirostat"):
        client.chat(model="echo", messages=HELLO, options={"mirostat": 1})
    with pytest.raises(ollama.ResponseError, match="num_gpus"):
        client.generate(model="echo", prompt="hi", options={"num_gpus": 1})  # a misspelling
    # Clients send every option they know, unset ones as null: those are fine.
    body = {"model": "echo", "prompt": "hi", "stream": False, "options": {"mirostat": None}}
    assert httpx.post(f"{gateway.url}/api/generate", json=body).status_code == 200


def test_samplers_set_to_off_are_accepted(gateway, client):
    # Ollama's own "off" values change nothing: mirostat 0 (its tau and eta then unused),
    # typical_p 1 and tfs_z 1. Any other value would change the answer: refused by name.
    off = {"mirostat": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1, "typical_p": 1.0, "tfs_z": 1}
    reply = client.chat(model="echo", messages=HELLO, options=off)
    assert reply.message.content == "hello from echo, a reply of some length"
    ignored = gateway.wait_event("options_ignored")
    assert ignored["options"] == sorted(off)
    for name, value in [("mirostat", 2), ("typical_p", 0.9), ("tfs_z", 0.5)]:
        with pytest.raises(ollama.ResponseError, match=rf"\$.options.{name}") as refused:
            client.chat(model="echo", messages=HELLO, options={**off, name: value})
        assert refused.value.status_code == 400
    with pytest.raises(ollama.ResponseError, match=r"\$.options.mirostat"):
        client.generate(model="echo", prompt="hi", options={"mirostat": 1, "mirostat_tau": 5.0})


def test_hardware_hints_are_accepted_as_no_ops_and_said_ignored(gateway, client):
    hints = {
        "num_thread": 8,
        "num_gpu": 99,
        "num_batch": 512,
        "main_gpu": 0,
        "use_mmap": True,
        "use_mlock": False,
        "numa": False,
        "low_vram": False,
    }
    plain = client.generate(model="echo", prompt="hi")
    hinted = client.generate(model="echo", prompt="hi", options=hints)
    assert hinted.response == plain.response and hinted.eval_count == plain.eval_count
    ignored = gateway.wait_event("options_ignored", options=sorted(hints))
    assert "change no output" in ignored["reason"]
    chat = client.chat(model="echo", messages=HELLO, options={"num_thread": 4})
    assert chat.message.content.startswith("hello from echo")
    assert gateway.wait_event("options_ignored", options=["num_thread"])
    with pytest.raises(ollama.ResponseError, match=r"\$.options.num_keep"):
        client.chat(model="echo", messages=HELLO, options={**hints, "num_keep": 4})


def test_penalty_options_are_applied_not_refused(client):
    # What they do to an answer: tests/e2e/test_decoding_e2e.py; here, that they are taken.
    penalties = {
        "repeat_penalty": 1.1,
        "repeat_last_n": 64,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.5,
    }
    reply = client.chat(model="echo", messages=HELLO, options=penalties)
    assert reply.message.content.startswith("hello from echo")
    with pytest.raises(ollama.ResponseError, match=r"\$.options.repeat_penalty"):
        client.chat(model="echo", messages=HELLO, options={"repeat_penalty": 0})
