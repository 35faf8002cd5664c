"""Background responses (`background: true`) on a real gateway through the `openai` SDK:
created `queued`, polled to `completed`; cancelled (again: the same answer); streamed and
resumed with `starting_after`; another key's 404; `store: false` refused; a gateway that
stops or dies mid-response leaves it `failed`, saying so, for the next start to show."""

from __future__ import annotations

import json
import time

import openai
import pytest
from conftest import serving

REPLY = "one two three four five six seven eight"
CONFIG = f"""
server:
  api_keys: [key-a, key-b, {{key: key-c, label: carol, limits: {{concurrent: 1}}}}]
  state_dir: state
models:
  - id: echo
    engine: scripted
    script: {{reply: "hello from echo"}}
  - id: slow
    engine: scripted
    script: {{reply: "{REPLY}", token_delay: 0.05}}
  - id: stall
    engine: scripted
    script: {{reply: "{REPLY}", token_delay: 1.0}}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("background"), CONFIG) as process:
        yield process


@pytest.fixture(scope="module")
def alice(gateway):
    return gateway.openai("key-a")


@pytest.fixture(scope="module")
def bob(gateway):
    return gateway.openai("key-b")


def finished(client, response_id: str, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while (response := client.responses.retrieve(response_id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, response
        time.sleep(0.05)
    return response


def test_background_is_queued_then_polled_to_completed(gateway, alice):
    created = alice.responses.create(model="echo", input="hi", background=True)
    assert created.status == "queued" and created.background is True
    done = finished(alice, created.id)
    assert done.status == "completed" and done.background is True
    assert done.output_text == "hello from echo" and done.usage.output_tokens > 0
    assert done.created_at == created.created_at
    # Stored as any response: it continues a conversation, its input items are listed.
    items = alice.responses.input_items.list(created.id)
    assert [i.content[0].text for i in items.data] == ["hi"]
    follow = alice.responses.create(model="echo", input="more", previous_response_id=done.id)
    assert follow.status == "completed"
    # The work was a request through the door, under the key, its events naming the response.
    statuses = [
        e["status"] for e in gateway.events("background_response_changed", response_id=created.id)
    ]
    assert statuses == ["queued", "in_progress", "completed"]
    assert gateway.events("request_finished", response_id=created.id)


def test_background_needs_store(alice):
    with pytest.raises(openai.BadRequestError, match=r"background.*store"):
        alice.responses.create(model="echo", input="hi", background=True, store=False)


def test_unknown_model_is_refused_at_once(alice):
    with pytest.raises(openai.NotFoundError):
        alice.responses.create(model="no-such-model", input="hi", background=True)


def test_cancel_in_progress_then_again(gateway, alice):
    created = alice.responses.create(model="stall", input="hi", background=True)
    gateway.wait_event("background_response_changed", response_id=created.id, status="in_progress")
    cancelled = alice.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    assert alice.responses.retrieve(created.id).status == "cancelled"
    assert alice.responses.cancel(created.id).status == "cancelled"  # idempotent
    # The runner withdrew the work: the model is free at once for the next request.
    assert alice.responses.create(model="stall", input="x", max_output_tokens=1).status


def test_a_running_response_cannot_be_continued_yet(alice):
    created = alice.responses.create(model="stall", input="hi", background=True)
    with pytest.raises(openai.BadRequestError, match="continue it once it has finished"):
        alice.responses.create(model="echo", input="next", previous_response_id=created.id)
    assert alice.responses.cancel(created.id).status == "cancelled"


def test_delete_while_running_cancels_it_first(gateway, alice):
    created = alice.responses.create(model="stall", input="hi", background=True)
    gateway.wait_event("background_response_changed", response_id=created.id, status="in_progress")
    alice.responses.delete(created.id)
    gateway.wait_event("background_response_changed", response_id=created.id, status="cancelled")
    with pytest.raises(openai.NotFoundError):
        alice.responses.retrieve(created.id)


def test_cancel_finished_answers_it_as_it_ended(alice):
    created = alice.responses.create(model="echo", input="hi", background=True)
    assert finished(alice, created.id).status == "completed"
    again = alice.responses.cancel(created.id)
    assert again.status == "completed" and again.output_text == "hello from echo"


def test_cancel_refuses_a_response_not_in_background(alice):
    plain = alice.responses.create(model="echo", input="hi")
    with pytest.raises(openai.BadRequestError, match="background"):
        alice.responses.cancel(plain.id)


def test_stream_then_resume_starting_after(alice):
    stream = alice.responses.create(model="slow", input="hi", background=True, stream=True)
    first = []
    for event in stream:
        first.append(event)
        if event.type == "response.output_text.delta":
            break
    stream.close()  # the client leaves: the work goes on
    assert first[0].type == "response.queued" and first[0].response.status == "queued"
    response_id = first[0].response.id
    last = first[-1].sequence_number
    rest = list(alice.responses.retrieve(response_id, stream=True, starting_after=last))
    events = first + rest
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == REPLY == events[-1].response.output_text
    # Once finished, the whole stream is kept: read back from the start too.
    again = list(alice.responses.retrieve(response_id, stream=True))
    assert [e.sequence_number for e in again] == list(range(len(events)))
    assert [e.type for e in again] == [e.type for e in events]


def test_another_key_finds_nothing(alice, bob):
    created = alice.responses.create(model="slow", input="hi", background=True)
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.cancel(created.id)
    with pytest.raises(openai.NotFoundError):
        list(bob.responses.retrieve(created.id, stream=True, starting_after=0))
    assert finished(alice, created.id).status == "completed"  # bob's cancel changed nothing


def test_the_work_is_a_request_of_its_key_held_to_its_limits(gateway):
    carol = gateway.openai("key-c").with_options(max_retries=0)
    # The work meets the key's `concurrent: 1` while the create call still holds it: it
    # waits, queued, rather than failing.
    quick = carol.responses.create(model="echo", input="one", background=True)
    assert finished_despite_limits(carol, quick.id).output_text == "hello from echo"
    # And while it runs, it is the key's request in flight: another is refused.
    slow = carol.responses.create(model="slow", input="two", background=True)
    gateway.wait_event("background_response_changed", response_id=slow.id, status="in_progress")
    with pytest.raises(openai.RateLimitError, match="in flight"):
        carol.responses.create(model="echo", input="three")
    assert finished_despite_limits(carol, slow.id).output_text == REPLY


def finished_despite_limits(client, response_id: str, timeout: float = 30):
    """`finished`, for a key whose one request in flight may be its work (a poll: a 429)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            response = client.responses.retrieve(response_id)
        except openai.RateLimitError:
            response = None
        if response is not None and response.status not in ("queued", "in_progress"):
            return response
        time.sleep(0.05)
    raise AssertionError(f"{response_id} did not finish")


RESTART = """
server:
  state_dir: state
  shutdown_grace: 1s
models:
  - id: stall
    engine: scripted
    script: {reply: "one two three four five six seven eight", token_delay: 1.0}
"""


def test_restart_marks_a_running_response_failed(start_gateway):
    first = start_gateway(RESTART)
    client = first.openai()
    stopped = client.responses.create(model="stall", input="hi", background=True)
    first.wait_event("background_response_changed", response_id=stopped.id, status="in_progress")
    first.stop()  # SIGTERM: past the drain's grace, the work is withdrawn
    second = start_gateway(RESTART)
    client = second.openai()
    found = client.responses.retrieve(stopped.id)
    assert found.status == "failed" and "stopped" in found.error.message
    crashed = client.responses.create(model="stall", input="hi", background=True)
    second.wait_event("background_response_changed", response_id=crashed.id, status="in_progress")
    second.process.kill()  # no drain, no stop: the row is left in progress
    second.process.wait()
    third = start_gateway(RESTART)
    found = third.openai().responses.retrieve(crashed.id)
    assert found.status == "failed" and "restarted" in found.error.message
    assert found.error.code == "server_error"


def test_a_batch_line_asking_for_background_is_refused(alice):
    body = {"model": "echo", "input": "hi", "background": True}
    line = {"custom_id": "bg", "method": "POST", "url": "/v1/responses", "body": body}
    file = alice.files.create(file=("in.jsonl", json.dumps(line).encode()), purpose="batch")
    batch = alice.batches.create(
        input_file_id=file.id, endpoint="/v1/responses", completion_window="24h"
    )
    deadline = time.monotonic() + 30
    while (batch := alice.batches.retrieve(batch.id)).status != "completed":
        assert time.monotonic() < deadline, batch
        time.sleep(0.05)
    assert batch.request_counts.failed == 1
    (out,) = [json.loads(x) for x in alice.files.content(batch.error_file_id).text.splitlines()]
    assert out["response"]["status_code"] == 400
    assert "$.background" in out["response"]["body"]["error"]["message"]
