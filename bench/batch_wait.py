"""The interactive wait while a batch runs: time-to-first-token and total time of streamed
interactive requests to SmolLM2, on an idle gateway and while a long `/v1/batches` batch
runs on the same model (`server.batches.concurrency: 1`, the lowest priority).

    .venv/bin/python bench/batch_wait.py [--requests 5] [--lines 40] [--concurrency 1,auto]

`--concurrency` are the model's own `concurrency` values to measure (one gateway each): at
`1` the model decodes one request at a time, so an interactive request waits for the batch
line in flight to end (never for more than it: the lines behind it are queued below); at
`auto` it joins the line's decode batch at once and shares the steps. The batch's progress
over the interactive requests is reported too (lines completed while they ran).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import time

import httpx
from common import SMOLLM2, Gateway, chat_body, fmt, report, stream_chat, table

CONFIG = """
server:
  state_dir: state
  batches: {{concurrency: 1}}
models:
  - id: smollm2
    engine: mlx
    source: {source}
    residency: pinned
    concurrency: {concurrency}
    sampling: {{temperature: 0}}
"""
QUESTION = [{"role": "user", "content": "Name three rivers of Europe."}]
LINE_QUESTION = [{"role": "user", "content": "Write a short story about a lighthouse."}]


def interactive(gateway: Gateway, requests: int) -> list:
    with httpx.Client(timeout=600) as client:
        return [
            stream_chat(client, gateway.url, chat_body("smollm2", QUESTION, 32))
            for _ in range(requests)
        ]


def start_batch(gateway: Gateway, lines: int) -> str:
    import openai

    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    body = {"model": "smollm2", "messages": LINE_QUESTION, "max_tokens": 96}
    content = b"".join(
        json.dumps(
            {"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}
        ).encode()
        + b"\n"
        for i in range(lines)
    )
    file = client.files.create(file=("in.jsonl", io.BytesIO(content)), purpose="batch")
    batch = client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    while client.batches.retrieve(batch.id).request_counts.completed < 1:  # lines flowing
        time.sleep(0.1)
    return batch.id


def completed(gateway: Gateway, batch_id: str) -> int:
    batch = httpx.get(f"{gateway.url}/v1/batches/{batch_id}", timeout=30).json()
    return batch["request_counts"]["completed"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--concurrency", default="1,auto")
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows, platform = [], None
    for concurrency in args.concurrency.split(","):
        config = CONFIG.format(source=SMOLLM2, concurrency=concurrency)
        with Gateway(config, f"batch-wait-{concurrency}") as gateway:
            platform = gateway.platform()
            interactive(gateway, 1)  # warm-up
            idle = interactive(gateway, args.requests)
            batch_id = start_batch(gateway, args.lines)
            before = completed(gateway, batch_id)
            busy = interactive(gateway, args.requests)
            during = completed(gateway, batch_id) - before
            for name, timings in (("idle", idle), ("batch running", busy)):
                rows.append(
                    [
                        concurrency,
                        name,
                        fmt(statistics.median(t.ttft for t in timings), 3),
                        fmt(max(t.ttft for t in timings), 3),
                        fmt(statistics.median(t.ended - t.started for t in timings), 3),
                        during if name != "idle" else "",
                    ]
                )
    body = table(
        [
            "model concurrency",
            "gateway",
            "TTFT median s",
            "TTFT max s",
            "total median s",
            "batch lines done meanwhile",
        ],
        rows,
    )
    notes = (
        f"{args.requests} streamed interactive requests (32 tokens, greedy) one after another; "
        f"the batch: {args.lines} lines of 96 tokens at `server.batches.concurrency: 1`, "
        "priority -100."
    )
    report(
        "Interactive wait while a batch runs (SmolLM2)",
        body,
        platform_path=platform,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
