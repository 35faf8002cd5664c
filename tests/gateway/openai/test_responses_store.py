"""Stored Responses on a real gateway, through `openai`: previous_response_id, item_reference,
GET/DELETE /v1/responses/{id}, input_items, store: false, per-key scope, reasoning summaries;
and the store's TTL and size cap."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import threading
import time

import httpx
import openai
import pytest
from conftest import serving

from gateway.openai.response_store import ResponseStore
from schemas.config import ResponsesConfig, ServerConfig

CONFIG = """
server:
  api_keys: [key-a, key-b]
  state_dir: state
models:
  - id: echo
    engine: scripted
    script: {reply: "hello from echo"}
  - id: thinker
    engine: scripted
    script: {reply: "<think>the user greets me</think>Hello!"}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("stored"), CONFIG) as process:
        yield process


@pytest.fixture(scope="module")
def alice(gateway):
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="key-a", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def bob(gateway):
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="key-b", max_retries=0) as client:
        yield client


def chat_prompt_tokens(client, messages) -> int:
    reply = client.chat.completions.create(model="echo", messages=messages)
    return reply.usage.prompt_tokens


def test_previous_response_id_continues_the_conversation(gateway, alice):
    first = alice.responses.create(model="echo", input="My name is Ada.")
    assert first.store is True
    second = alice.responses.create(
        model="echo", input="What is my name?", previous_response_id=first.id
    )
    assert second.previous_response_id == first.id
    # The model saw the whole conversation: the same prompt as chat completions' three turns.
    assert second.usage.input_tokens == chat_prompt_tokens(
        alice,
        [
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": "hello from echo"},
            {"role": "user", "content": "What is my name?"},
        ],
    )
    assert (gateway.log.parent / "state" / "responses.sqlite3").is_file()


def test_a_streamed_response_is_stored_and_retrieved_as_it_finished(alice):
    with alice.responses.stream(model="echo", input="hi") as stream:
        final = stream.get_final_response()
    again = alice.responses.retrieve(final.id)
    assert again.id == final.id and again.output_text == "hello from echo"
    assert again.usage.total_tokens == final.usage.total_tokens


def test_item_reference_finds_stored_items(alice):
    first = alice.responses.create(model="echo", input="My name is Ada.")
    [question, answer] = [alice.responses.input_items.list(first.id).data[0], first.output[0]]
    second = alice.responses.create(
        model="echo",
        input=[
            {"type": "item_reference", "id": question.id},
            {"type": "item_reference", "id": answer.id},
            {"role": "user", "content": "What is my name?"},
        ],
        store=False,
    )
    chained = alice.responses.create(
        model="echo", input="What is my name?", previous_response_id=first.id, store=False
    )
    assert second.usage.input_tokens == chained.usage.input_tokens


def test_input_items_are_the_responses_own_newest_first(alice):
    first = alice.responses.create(model="echo", input="one")
    second = alice.responses.create(
        model="echo",
        previous_response_id=first.id,
        input=[{"role": "user", "content": "two"}, {"role": "user", "content": "three"}],
    )
    items = alice.responses.input_items.list(second.id).data
    assert [i.content[0].text for i in items] == ["three", "two"]
    assert all(i.id.startswith("msg_") for i in items)
    oldest = alice.responses.input_items.list(second.id, order="asc", limit=1)
    assert [i.content[0].text for i in oldest.data] == ["two"] and oldest.has_more


def test_store_false_stores_nothing(alice):
    kept = alice.responses.create(model="echo", input="hi", store=False)
    assert kept.store is False
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(kept.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.create(model="echo", input="hi", previous_response_id=kept.id)


def test_another_key_finds_nothing_and_delete_removes(alice, bob):
    mine = alice.responses.create(model="echo", input="secret")
    item = alice.responses.input_items.list(mine.id).data[0]
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.input_items.list(mine.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model="echo", input="hi", previous_response_id=mine.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model="echo", input=[{"type": "item_reference", "id": item.id}])
    with pytest.raises(openai.NotFoundError):
        bob.responses.delete(mine.id)
    alice.responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(mine.id)


def test_a_reasoning_summary_comes_when_asked(gateway):
    body = {
        "model": "thinker",
        "input": "hi",
        "stream": True,
        "reasoning": {"effort": "low", "summary": "auto"},
    }
    headers = {"authorization": "Bearer key-a"}
    names, final = [], None
    with httpx.stream(
        "POST", f"{gateway.url}/v1/responses", json=body, headers=headers, timeout=30
    ) as r:
        for line in r.iter_lines():
            if line.startswith("event: "):
                names.append(line[7:])
            if line.startswith("data: ") and '"response.completed"' in line:
                final = httpx.Response(200, content=line[6:]).json()["response"]
    assert "response.reasoning_summary_text.delta" in names
    assert "response.reasoning_text.delta" not in names
    reasoning = final["output"][0]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "the user greets me"}]
    assert final["output"][1]["content"][0]["text"] == "Hello!"


# The store itself: TTL, size cap, in memory.


def test_expired_responses_are_gone(tmp_path):
    server = ServerConfig(state_dir=str(tmp_path), responses=ResponsesConfig(ttl="1s"))
    store = ResponseStore(server, tmp_path)
    store.save(server, "me", {"id": "resp_1", "output": []}, [], [])
    assert store.response("me", "resp_1") == {"id": "resp_1", "output": []}
    time.sleep(1.1)
    assert store.response("me", "resp_1") is None


def test_the_size_cap_drops_the_oldest_first(tmp_path):
    server = ServerConfig(state_dir=None, responses=ResponsesConfig(max_bytes="1KB"))
    store = ResponseStore(server, tmp_path)
    assert store.path == ":memory:" and not list(tmp_path.iterdir())
    for i in range(4):
        text = "x" * 300
        store.save(server, "me", {"id": f"resp_{i}", "output": [], "t": text}, [], [])
    kept = [i for i in range(4) if store.response("me", f"resp_{i}")]
    assert kept == [2, 3]


def _fill_expired(path, rows: int, size: int) -> None:
    """`rows` responses that expired an hour ago, written straight into the store's file."""
    old = time.time() - 3600
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO responses VALUES (?, 'me', ?, ?, '{}', '[]', '[]', ?)",
            [(f"resp_old_{i}", old - 10 + i * 1e-4, old, size) for i in range(rows)],
        )


def test_expired_rows_do_not_push_live_ones_out(tmp_path):
    server = ServerConfig(state_dir=str(tmp_path), responses=ResponsesConfig(max_bytes="64KB"))
    store = ResponseStore(server, tmp_path)
    for i in range(45):
        if i == 44:  # rows that expired since the last save, not yet evicted
            _fill_expired(store.path, 45, 1000)
        store.save(server, "me", {"id": f"resp_{i}", "output": [], "t": "x" * 1000}, [], [])
    kept = [i for i in range(45) if store.response("me", f"resp_{i}")]
    assert kept == list(range(45))  # 45 KB of live rows fit 64 KB: none goes


def test_a_save_among_many_expired_rows_is_quick(tmp_path):
    server = ServerConfig(state_dir=str(tmp_path), responses=ResponsesConfig(max_bytes="1MB"))
    store = ResponseStore(server, tmp_path)
    _fill_expired(store.path, 16_000, 100)
    started = time.perf_counter()
    store.save(server, "me", {"id": "resp_new", "output": []}, [], [])
    took = time.perf_counter() - started
    assert took < 0.3, f"one save took {took:.2f}s"  # 4.1 s when eviction was quadratic
    assert store.response("me", "resp_new") is not None


def test_a_save_waiting_for_a_lock_does_not_stall_the_loop(tmp_path):
    """Another process (a second gateway on the same state_dir) holding the write lock
    makes a save wait; the wait is on a worker thread, and other requests go on."""
    with serving(tmp_path, CONFIG) as gateway:
        key = {"authorization": "Bearer key-a"}
        body = {"model": "echo", "input": "hi"}
        httpx.post(f"{gateway.url}/v1/responses", json=body, headers=key, timeout=30)
        db = sqlite3.connect(tmp_path / "state" / "responses.sqlite3", isolation_level=None)
        db.execute("BEGIN IMMEDIATE")  # the write lock, held for 1.5 s
        saving = threading.Thread(
            target=httpx.post,
            args=(f"{gateway.url}/v1/responses",),
            kwargs={"json": body, "headers": key, "timeout": 30},
        )
        saving.start()
        time.sleep(0.3)
        started = time.perf_counter()
        httpx.get(f"{gateway.url}/health", timeout=30).raise_for_status()
        took = time.perf_counter() - started
        time.sleep(1.2)
        db.execute("ROLLBACK")
        saving.join()
        assert took < 0.5, f"/health waited {took:.2f}s behind a save"


# A store that cannot be used: said at start, refused before generating, store: false works.


def _post(gateway, **body) -> httpx.Response:
    headers = {"authorization": "Bearer key-a"}
    body = {"model": "echo", "input": "hi", **body}
    return httpx.post(f"{gateway.url}/v1/responses", json=body, headers=headers, timeout=30)


def _refused_naming(reply: httpx.Response, path) -> None:
    assert reply.status_code == 503, reply.text
    error = reply.json()["error"]
    assert error["type"] == "server_error" and str(path) in error["message"]


def test_a_corrupt_store_is_reported_at_start_and_store_false_still_works(tmp_path):
    database = tmp_path / "state" / "responses.sqlite3"
    database.parent.mkdir()
    database.write_bytes(b"this is not a database " * 100)
    with serving(tmp_path, CONFIG) as gateway:
        started = gateway.events("server_started")[0]
        assert started["responses_store"] == str(database)
        assert "not a database" in started["responses_store_problem"]
        assert _post(gateway, store=False).json()["output"][0]["content"][0]["text"]
        _refused_naming(_post(gateway), database)
        _refused_naming(_post(gateway, stream=True), database)
        _refused_naming(_post(gateway, store=False, previous_response_id="resp_1"), database)
        headers = {"authorization": "Bearer key-a"}
        got = httpx.get(f"{gateway.url}/v1/responses/resp_1", headers=headers, timeout=30)
        _refused_naming(got, database)
        assert len(gateway.events("generated")) == 1  # the store: false one only


@contextlib.contextmanager
def read_only(path):
    """`path` that no one can write: chmod, or for root (whom modes do not stop) chattr +i."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        path.parent.chmod(0o555)
        try:
            yield
        finally:
            path.parent.chmod(0o755)
            path.chmod(0o644)
        return
    if subprocess.run(["chattr", "+i", path, path.parent], capture_output=True).returncode:
        pytest.skip("running as root where chattr +i is refused: cannot make a file read-only")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", path, path.parent], check=True)


def test_a_read_only_store_refuses_before_generating(tmp_path):
    database = tmp_path / "state" / "responses.sqlite3"
    ResponseStore(ServerConfig(state_dir=str(database.parent)), tmp_path)
    with read_only(database), serving(tmp_path, CONFIG) as gateway:
        started = gateway.events("server_started")[0]
        assert "readonly" in started["responses_store_problem"]
        assert _post(gateway, store=False).status_code == 200
        _refused_naming(_post(gateway), database)
        _refused_naming(_post(gateway, stream=True), database)  # a 503, not a stream
        assert len(gateway.events("generated")) == 1  # the store: false one only


def test_the_store_is_private(tmp_path):
    server = ServerConfig(state_dir=str(tmp_path / "state"))
    store = ResponseStore(server, tmp_path)
    store.save(server, "me", {"id": "resp_1", "output": []}, [], [])
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    for made in (tmp_path / "state").iterdir():  # the database, its WAL and shared memory
        assert made.stat().st_mode & 0o777 == 0o600, made


def test_two_gateways_share_one_state_dir(tmp_path):
    """A second process's open read does not stop a save (WAL), and each sees the other's."""
    server = ServerConfig(state_dir=str(tmp_path))
    first, second = ResponseStore(server, tmp_path), ResponseStore(server, tmp_path)
    first.save(server, "me", {"id": "resp_1", "output": []}, [], [])
    reader = sqlite3.connect(first.path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM responses").fetchone()  # a read in progress
    started = time.perf_counter()
    second.save(server, "me", {"id": "resp_2", "output": []}, [], [])
    took = time.perf_counter() - started
    reader.execute("ROLLBACK")
    reader.close()
    assert took < 1, f"the save waited {took:.1f}s for a reader"
    assert first.response("me", "resp_2") and second.response("me", "resp_1")
