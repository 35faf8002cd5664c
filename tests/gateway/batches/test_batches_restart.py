"""A batch outlives its gateway: stopped mid-batch (SIGTERM, the drain), a gateway started
again on the same `state_dir` resumes it, and no line that completed before runs again."""

from __future__ import annotations

import io
import json
import time

CONFIG = """
server:
  api_keys: [key-a]
  state_dir: state
  batches: {concurrency: 1}
models:
  - id: slow
    engine: scripted
    script: {reply: "one two three four five six seven eight", token_delay: 0.05}
"""
LINES = 6


def line(custom_id: str) -> dict:
    body = {"model": "slow", "messages": [{"role": "user", "content": custom_id}]}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def ran(gateway, batch_id: str) -> list[str]:
    """The custom_ids of the lines this gateway process answered, in order."""
    finished = gateway.events("request_finished", batch_id=batch_id)
    return [event["custom_id"] for event in finished]


def test_restart_resumes_and_runs_no_completed_line_twice(start_gateway):
    first = start_gateway(CONFIG)
    client = first.openai("key-a")
    content = b"".join(json.dumps(line(f"r{i}")).encode() + b"\n" for i in range(LINES))
    file = client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    batch = client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    deadline = time.monotonic() + 60
    while client.batches.retrieve(batch.id).request_counts.completed < 2:
        assert time.monotonic() < deadline, "the batch made no progress"
        time.sleep(0.05)
    first.stop()  # SIGTERM: the drain lets the line in flight finish; no new line starts
    before = ran(first, batch.id)
    assert 2 <= len(before) < LINES, before
    assert first.events("server_stopping")[0]["drained"] is True

    second = start_gateway(CONFIG)
    client = second.openai("key-a")
    assert client.files.content(file.id).content == content  # the upload survived too
    deadline = time.monotonic() + 60
    while (resumed := client.batches.retrieve(batch.id)).status != "completed":
        assert time.monotonic() < deadline, resumed
        time.sleep(0.05)
    after = ran(second, batch.id)
    # Every line ran exactly once across the two processes, in order, and none failed.
    assert before + after == [f"r{i}" for i in range(LINES)]
    assert resumed.request_counts.completed == LINES and resumed.request_counts.failed == 0
    assert resumed.error_file_id is None
    out = [json.loads(x) for x in client.files.content(resumed.output_file_id).text.splitlines()]
    assert [x["custom_id"] for x in out] == [f"r{i}" for i in range(LINES)]
    assert {x["response"]["status_code"] for x in out} == {200}
    # The second process picked the batch up as in progress and took it to the end.
    statuses = [e["status"] for e in second.events("batch_changed", batch_id=batch.id)]
    assert statuses == ["finalizing", "completed"]
