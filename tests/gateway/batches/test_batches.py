"""Files and batches on a real gateway through the `openai` SDK: upload, list, read and
delete files; a batch from upload to its output and error files; validation failures;
cancel; two keys; an interactive request served while a long batch runs; the bounds."""

from __future__ import annotations

import io
import json
import time

import httpx
import openai
import pytest
from conftest import serving

CONFIG = """
server:
  admin_key: admin-secret-0123
  api_keys:
    - key-a
    - key-b
    - {key: key-c, label: carol, limits: {concurrent: 1}}
  state_dir: state
  files: {max_bytes: 64KiB, max_file_bytes: 16KiB}
  limits: {max_body_bytes: 8KiB}  # below the files' bound: an upload is held to that
  batches: {concurrency: 1}
models:
  - id: echo
    aliases: [echo-alias]
    engine: scripted
    script: {reply: "hello from echo"}
  - id: slow
    engine: scripted
    script: {reply: "one two three four five six seven eight", token_delay: 0.05}
  - id: stall
    engine: scripted
    script: {reply: "one two three four five six", token_delay: 0.5}
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with serving(tmp_path_factory.mktemp("batches"), CONFIG) as process:
        yield process


@pytest.fixture(scope="module")
def alice(gateway):
    return gateway.openai("key-a")


@pytest.fixture(scope="module")
def bob(gateway):
    return gateway.openai("key-b")


def jsonl(lines: list[dict]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def chat_line(custom_id: str, model: str = "echo", **body) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": custom_id}], **body}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def upload(client, lines: list[dict]):
    return client.files.create(file=("input.jsonl", io.BytesIO(jsonl(lines))), purpose="batch")


def wait_for(client, batch_id: str, statuses: set[str], timeout: float = 60):
    deadline = time.monotonic() + timeout
    batch = None
    while time.monotonic() < deadline:
        try:
            batch = client.batches.retrieve(batch_id)
        except openai.RateLimitError:  # a poll is a request of the key's too
            time.sleep(0.1)
            continue
        if batch.status in statuses:
            return batch
        time.sleep(0.1)
    raise TimeoutError(f"batch {batch_id} still {batch and batch.status}")


def output_lines(client, file_id: str) -> list[dict]:
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def test_files_upload_list_read_delete(alice):
    content = jsonl([chat_line("a")])
    made = alice.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    assert made.id.startswith("file-") and made.bytes == len(content)
    assert made.filename == "in.jsonl" and made.purpose == "batch"
    assert alice.files.retrieve(made.id).bytes == len(content)
    assert alice.files.content(made.id).content == content
    assert made.id in [f.id for f in alice.files.list()]
    assert alice.files.delete(made.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        alice.files.retrieve(made.id)


def test_files_bounds_are_413(alice):
    # Past limits.max_body_bytes yet within server.files.max_file_bytes: taken.
    within = alice.files.create(file=("in", io.BytesIO(b"w" * 12 * 1024)), purpose="batch")
    assert within.bytes == 12 * 1024
    alice.files.delete(within.id)
    with pytest.raises(openai.APIStatusError) as big:
        alice.files.create(file=("big.jsonl", io.BytesIO(b"x" * 17 * 1024)), purpose="batch")
    assert big.value.status_code == 413 and "max_file_bytes" in big.value.message
    kept = [
        alice.files.create(file=(f"f{i}", io.BytesIO(b"y" * 15 * 1024)), purpose="batch")
        for i in range(4)
    ]
    with pytest.raises(openai.APIStatusError) as full:
        alice.files.create(file=("more", io.BytesIO(b"z" * 8 * 1024)), purpose="batch")
    assert full.value.status_code == 413 and "server.files.max_bytes" in full.value.message
    for file in kept:
        alice.files.delete(file.id)
    for purpose in ("fine-tune", "user_data"):  # no route reads such a file: refused
        with pytest.raises(openai.BadRequestError, match="purpose"):
            alice.files.create(file=("p", io.BytesIO(b"{}")), purpose=purpose)


def test_batch_runs_to_its_output_and_error_files(gateway, alice):
    lines = [
        chat_line("first"),
        chat_line("second", model="echo-alias", max_tokens=2),
        chat_line("unknown-model", model="nope"),
        chat_line("bad-field", temperature="hot"),
    ]
    batch = alice.batches.create(
        input_file_id=upload(alice, lines).id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"job": "nightly"},
    )
    assert batch.status == "validating" and batch.metadata == {"job": "nightly"}
    done = wait_for(alice, batch.id, {"completed", "failed"})
    assert done.status == "completed", done
    assert done.request_counts.total == 4
    assert done.request_counts.completed == 2 and done.request_counts.failed == 2
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    out = output_lines(alice, done.output_file_id)
    assert [line["custom_id"] for line in out] == ["first", "second"]
    first = out[0]
    assert first["id"].startswith("batch_req_") and first["error"] is None
    assert first["response"]["status_code"] == 200
    assert first["response"]["request_id"].startswith("req_")
    body = first["response"]["body"]
    assert body["object"] == "chat.completion" and body["model"] == "echo"
    assert body["choices"][0]["message"]["content"] == "hello from echo"
    assert out[1]["response"]["body"]["choices"][0]["finish_reason"] == "length"
    errors = {
        line["custom_id"]: line["response"] for line in output_lines(alice, done.error_file_id)
    }
    assert errors["unknown-model"]["status_code"] == 404
    assert "nope" in errors["unknown-model"]["body"]["error"]["message"]
    assert errors["bad-field"]["status_code"] == 400
    # Each line was a request through the gateway's door, its events naming the batch.
    finished = gateway.wait_events("request_finished", 4, batch_id=batch.id)
    assert sorted(e["status"] for e in finished) == [200, 200, 400, 404]
    assert {e["key_label"] for e in finished} == {e["key_label"] for e in finished[:1]}
    queued = gateway.events("request_queued", batch_id=batch.id)
    assert queued and {e["priority"] for e in queued} == {-100}
    changed = [e["status"] for e in gateway.events("batch_changed", batch_id=batch.id)]
    assert changed == ["in_progress", "finalizing", "completed"]


def test_invalid_file_fails_validation_with_its_lines(alice):
    lines = [
        chat_line("ok"),
        {"custom_id": "x", "method": "POST", "url": "/v1/embeddings", "body": {"model": "echo"}},
        chat_line("ok"),
        chat_line("streamed", stream=True),
    ]
    content = jsonl(lines) + b"not json\n"
    file = alice.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    batch = alice.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    failed = wait_for(alice, batch.id, {"failed", "completed"})
    assert failed.status == "failed" and failed.failed_at
    found = {(e.line, e.code) for e in failed.errors.data}
    assert found == {
        (2, "mismatched_endpoint"),
        (3, "duplicate_custom_id"),
        (4, "invalid_request"),
        (5, "invalid_json_line"),
    }


def test_create_refuses_what_it_cannot_honour(alice):
    file = upload(alice, [chat_line("a")])
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        alice.batches.create(
            input_file_id=file.id, endpoint="/v1/moderations", completion_window="24h"
        )  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        alice.batches.create(
            input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="soon"
        )  # type: ignore[arg-type]
    with pytest.raises(openai.NotFoundError):
        alice.batches.create(
            input_file_id="file-none", endpoint="/v1/chat/completions", completion_window="24h"
        )


def test_a_key_sees_only_its_own(alice, bob):
    file = upload(alice, [chat_line("mine")])
    batch = alice.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    for read in (bob.files.retrieve, bob.files.content, bob.files.delete):
        with pytest.raises(openai.NotFoundError):
            read(file.id)
    with pytest.raises(openai.NotFoundError):
        bob.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        bob.batches.cancel(batch.id)
    with pytest.raises(openai.NotFoundError):  # another key's file is no input of its batch
        bob.batches.create(
            input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
    assert file.id not in [f.id for f in bob.files.list()]
    assert batch.id not in [b.id for b in bob.batches.list()]
    assert batch.id in [b.id for b in alice.batches.list()]


def test_list_pages_newest_first(alice):
    file = upload(alice, [chat_line("page")])
    made = [
        alice.batches.create(
            input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
        ).id
        for _ in range(3)
    ]
    first = alice.batches.list(limit=2)
    assert [b.id for b in first.data] == made[::-1][:2] and first.has_more
    second = alice.batches.list(limit=2, after=first.data[-1].id)
    assert second.data[0].id == made[0]
    every = [b.id for b in alice.batches.list(limit=2)]  # the SDK's auto-paging
    assert every[:3] == made[::-1]


def test_cancel_withdraws_what_is_left(gateway, alice):
    lines = [chat_line(f"c{i}", model="slow") for i in range(20)]
    batch = alice.batches.create(
        input_file_id=upload(alice, lines).id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    running = wait_for(alice, batch.id, {"in_progress"})
    deadline = time.monotonic() + 30
    while running.request_counts.completed < 1 and time.monotonic() < deadline:
        running = alice.batches.retrieve(batch.id)
    cancelling = alice.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at
    cancelled = wait_for(alice, batch.id, {"cancelled"})
    assert 1 <= cancelled.request_counts.completed < 20
    assert cancelled.cancelled_at
    out = output_lines(alice, cancelled.output_file_id)
    assert len(out) == cancelled.request_counts.completed
    with pytest.raises(openai.APIStatusError) as again:  # already ended: a 409
        done = wait_for(
            alice,
            alice.batches.create(
                input_file_id=upload(alice, [chat_line("z")]).id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
            ).id,
            {"completed"},
        )
        alice.batches.cancel(done.id)
    assert again.value.status_code == 409


def test_interactive_request_goes_before_the_batch(gateway, alice):
    """At concurrency 1, a long batch on a model holds one line in flight: an interactive
    request queued meanwhile is served next, before the batch's remaining lines."""
    lines = [chat_line(f"long{i}", model="slow") for i in range(8)]
    batch = alice.batches.create(
        input_file_id=upload(alice, lines).id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    wait_for(alice, batch.id, {"in_progress"})
    gateway.wait_event("request_started", batch_id=batch.id, custom_id="long0")
    reply = alice.with_options(timeout=60).chat.completions.create(
        model="slow", messages=[{"role": "user", "content": "me first"}]
    )
    assert reply.choices[0].message.content.startswith("one two")
    # No more than the line in flight when it came (and the one that may have started
    # in the instant before it queued) finished before it.
    after = alice.batches.retrieve(batch.id)
    assert after.status == "in_progress" and after.request_counts.completed <= 2
    done = wait_for(alice, batch.id, {"completed"})
    assert done.request_counts.completed == 8
    # At most one line of the batch was in flight at any moment (concurrency 1): in the
    # log, each line's start follows the previous line's finish.
    kinds = [
        event["event"]
        for event in gateway.events(batch_id=batch.id)
        if event["event"] in ("request_started", "request_finished")
    ]
    assert kinds == ["request_started", "request_finished"] * 8


def test_past_its_window_a_batch_expires(alice):
    lines = [chat_line(f"e{i}", model="slow") for i in range(20)]
    batch = alice.batches.create(
        input_file_id=upload(alice, lines).id,
        endpoint="/v1/chat/completions",
        completion_window="1s",
    )
    expired = wait_for(alice, batch.id, {"expired", "completed"})
    assert expired.status == "expired" and expired.expired_at
    counts = expired.request_counts
    assert counts.total == 20 and counts.completed < 20
    assert counts.completed + counts.failed == 20
    errors = output_lines(alice, expired.error_file_id)
    assert len(errors) == counts.failed
    assert {line["error"]["code"] for line in errors} == {"batch_expired"}
    assert all(line["response"] is None for line in errors)


@pytest.mark.parametrize(
    ("endpoint", "body", "text"),
    [
        ("/v1/completions", {"prompt": "say"}, lambda b: b["choices"][0]["text"]),
        (
            "/v1/responses",
            {"input": "say", "store": False},
            lambda b: b["output"][0]["content"][0]["text"],
        ),
    ],
)
def test_other_endpoints_run_their_own_route(alice, endpoint, body, text):
    line = {
        "custom_id": "one",
        "method": "POST",
        "url": endpoint,
        "body": {"model": "echo", **body},
    }
    batch = alice.batches.create(
        input_file_id=upload(alice, [line]).id, endpoint=endpoint, completion_window="24h"
    )
    done = wait_for(alice, batch.id, {"completed", "failed"})
    assert done.status == "completed" and done.request_counts.completed == 1, done
    (out,) = output_lines(alice, done.output_file_id)
    assert out["response"]["status_code"] == 200
    assert text(out["response"]["body"]) == "hello from echo"


def test_a_line_past_its_keys_limits_waits_its_turn(gateway):
    """Lines are requests of their key's, held to its limits (here `concurrent: 1`): line
    `a` (on one model) takes the key's one slot, so the key's own request meanwhile is a
    429, and line `b` (another model) is refused with a 429, waits out its Retry-After
    without the batch sending `c`, and runs once `a` has ended. None fails."""
    carol = gateway.openai("key-c")
    lines = [chat_line("a", model="stall"), chat_line("b"), chat_line("c")]
    batch = carol.batches.create(
        input_file_id=upload(carol, lines).id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    gateway.wait_event("request_queued", timeout=30, batch_id=batch.id, custom_id="a")
    with pytest.raises(openai.RateLimitError):
        carol.models.list()
    refused = gateway.wait_event("rate_limited", timeout=30, batch_id=batch.id)
    assert refused["key_label"] == "carol" and refused["limit"] == "concurrent"
    done = wait_for(carol, batch.id, {"completed", "failed"})
    assert done.status == "completed" and done.request_counts.completed == 3, done
    assert done.request_counts.failed == 0 and done.error_file_id is None
    # Only the waiting line asked again: the batch sent no other line meanwhile.
    asked = {e["custom_id"] for e in gateway.events("rate_limited", batch_id=batch.id)}
    assert asked == {"b"}


def test_the_admin_lists_every_keys_batches_and_cancels_any(gateway, alice, bob):
    mine = alice.batches.create(
        input_file_id=upload(alice, [chat_line(f"s{i}", model="slow") for i in range(20)]).id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    theirs = bob.batches.create(
        input_file_id=upload(bob, [chat_line("t")]).id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    admin = {"Authorization": "Bearer admin-secret-0123"}
    listed = httpx.get(f"{gateway.url}/admin/batches?limit=100", headers=admin, timeout=30)
    assert listed.status_code == 200
    owners = {row["batch"]["id"]: row["owner"] for row in listed.json()["data"]}
    assert owners[mine.id] != owners[theirs.id]  # each key's label, both listed
    assert httpx.get(f"{gateway.url}/ui/api/batches", headers=admin, timeout=30).is_success
    for key in ("key-a", "key-b"):  # an API key is no admin
        refused = httpx.get(
            f"{gateway.url}/admin/batches", headers={"Authorization": f"Bearer {key}"}
        )
        assert refused.status_code in (401, 403)
    cancel = httpx.post(f"{gateway.url}/admin/batches/{mine.id}/cancel", headers=admin)
    assert cancel.status_code == 200 and cancel.json()["status"] in ("cancelling", "cancelled")
    assert wait_for(alice, mine.id, {"cancelled"}).request_counts.completed < 20
    missing = httpx.post(f"{gateway.url}/admin/batches/batch_none/cancel", headers=admin)
    assert missing.status_code == 404


def test_files_list_pages_in_either_order(bob):
    made = [
        bob.files.create(file=(f"p{i}", io.BytesIO(b"{}\n")), purpose="batch").id for i in range(3)
    ]
    newest = bob.files.list(limit=2)
    assert [f.id for f in newest.data] == made[::-1][:2] and newest.has_more
    rest = bob.files.list(limit=2, after=newest.data[-1].id)
    assert rest.data[0].id == made[0]
    oldest = [f.id for f in bob.files.list(order="asc", purpose="batch") if f.id in made]
    assert oldest == made
    assert [f.id for f in bob.files.list(purpose="batch_output") if f.id in made] == []
    with pytest.raises(openai.BadRequestError):
        bob.files.list(limit=0)
    for file_id in made:
        bob.files.delete(file_id)


def test_responses_lines_store_under_the_batchs_key(alice, bob):
    """A `/v1/responses` line reads and writes the stored Responses of the key that made
    the batch: it continues that key's response, and its own is that key's to retrieve."""
    earlier = alice.responses.create(model="echo", input="first")
    body = {"model": "echo", "input": "next", "previous_response_id": earlier.id}
    line = {"custom_id": "next", "method": "POST", "url": "/v1/responses", "body": body}
    batch = alice.batches.create(
        input_file_id=upload(alice, [line]).id, endpoint="/v1/responses", completion_window="24h"
    )
    done = wait_for(alice, batch.id, {"completed", "failed"})
    assert done.request_counts.completed == 1, output_lines(alice, done.error_file_id)
    (out,) = output_lines(alice, done.output_file_id)
    stored = out["response"]["body"]
    assert stored["previous_response_id"] == earlier.id
    assert alice.responses.retrieve(stored["id"]).output_text == "hello from echo"
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(stored["id"])
