"""Run a batch through the gateway with OpenAI's own SDK: upload `examples/batch.jsonl`,
create the batch, poll it to its end, print its output lines.

    GATEWAY_URL=http://127.0.0.1:8000 python examples/openai_batch.py

Each line is run as the same request sent to `/v1/chat/completions` would be, queued below
interactive requests (`server.batches.priority`). The key is only checked when
`server.api_keys` is set; a key sees only its own files and batches.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from openai import OpenAI

client = OpenAI(
    base_url=os.environ.get("GATEWAY_URL", "http://127.0.0.1:8000") + "/v1",
    api_key=os.environ.get("GATEWAY_API_KEY", "unused"),
)
lines = Path(__file__).with_name("batch.jsonl")
upload = client.files.create(file=lines.open("rb"), purpose="batch")
print(f"uploaded {upload.id} ({upload.bytes} bytes)")
batch = client.batches.create(
    input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
)
while batch.status not in ("completed", "failed", "expired", "cancelled"):
    print(
        f"{batch.id}: {batch.status} {batch.request_counts.completed}/{batch.request_counts.total}"
    )
    time.sleep(1)
    batch = client.batches.retrieve(batch.id)
print(f"{batch.id}: {batch.status} {batch.request_counts.completed}/{batch.request_counts.total}")
if batch.output_file_id:
    for raw in client.files.content(batch.output_file_id).text.splitlines():
        line = json.loads(raw)
        answer = line["response"]["body"]["choices"][0]["message"]["content"]
        print(f"{line['custom_id']}: {answer!r}")
if batch.error_file_id:
    print(client.files.content(batch.error_file_id).text)
