"""The KV cache's disk tier under a vision model: a question about a picture after a restart,
against cold.

    .venv/bin/python bench/disk_cache_vision.py [--tokens 1000] [--repeats 2]

The demo VLM (engines/vision/demo.py: the real SmolLM2 behind a seeded vision tower). Each
repeat asks about its own picture after a system prompt of about `--tokens` tokens: cold on
a first gateway, then again on a second one on the same `server.cache` directory (the
prompt's blocks come from disk). Ratio: TTFT after the restart / cold TTFT. The vision
tower still encodes the picture on the second gateway: only the language model's prefill
is saved.
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import sys
import tempfile

import httpx
import numpy as np
from common import Gateway, chat_body, fmt, median, report, stream_chat, table
from PIL import Image

from engines.vision.demo import build_demo_vlm


def picture(seed: int) -> str:
    pixels = np.random.default_rng(seed).integers(0, 255, (100, 150, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def messages(seed: int, tokens: int) -> list[dict]:
    rules = " ".join(
        f"Rule {i}: describe what you see in a few words." for i in range(tokens // 12)
    )
    content = [
        {"type": "image_url", "image_url": {"url": picture(seed)}},
        {"type": "text", "text": "Describe this picture."},
    ]
    return [{"role": "system", "content": rules}, {"role": "user", "content": content}]


def config(demo, cache: str) -> str:
    return f"""
server: {{host: 127.0.0.1, cache: {{dir: {cache}, max_bytes: 20GiB}}}}
models:
  - id: vlm
    source: {demo}
    context: {{max: 4096}}
"""


def ask(client, gateway, body: dict) -> dict:
    timing = stream_chat(client, gateway.url, body)
    event = gateway.generated(timing.request_id)
    return {
        "ttft": timing.ttft,
        "text": timing.text,
        "prompt": event["prompt_tokens"],
        "disk": event.get("reused_disk_tokens", 0),
        "load": event.get("disk_load_s", 0.0),
        "prefill": event["prefill_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=1000, help="system prompt, about")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=8)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    load_before = os.getloadavg()
    demo, cache = build_demo_vlm(), tempfile.TemporaryDirectory(prefix="bench-kv-vision-")
    bodies = [
        chat_body("vlm", messages(seed, args.tokens), args.max_tokens)
        for seed in range(args.repeats)
    ]
    client = httpx.Client(timeout=3600)
    with Gateway(config(demo, cache.name), "vision-disk-1") as gateway:
        cold = [ask(client, gateway, body) for body in bodies]
    with Gateway(config(demo, cache.name), "vision-disk-2") as gateway:
        warm = [ask(client, gateway, body) for body in bodies]
        platform_path = gateway.platform()
    for r, (c, w) in enumerate(zip(cold, warm, strict=True)):
        print(
            f"repeat {r}: cold {c['ttft']:.2f}s, after restart {w['ttft']:.2f}s, disk {w['disk']}"
        )
    identical = all(c["text"] == w["text"] for c, w in zip(cold, warm, strict=True))
    rows = []
    for what in ("ttft", "prefill"):
        ratio = median([w[what] / c[what] for c, w in zip(cold, warm, strict=True)])
        rows.append(
            [
                f"after a restart ({'TTFT' if what == 'ttft' else 'engine prefill_s'})",
                fmt(median([c[what] for c in cold])),
                fmt(median([w[what] for w in warm])),
                fmt(ratio, 3),
                f"disk {median([w['disk'] for w in warm])}, "
                f"read in {fmt(median([w['load'] for w in warm]), 3)} s",
            ]
        )
    body = table(["case", "cold s", "with the disk tier s", "ratio (median)", "reused"], rows)
    notes = (
        f"The demo VLM, a system prompt and one 150x100 picture: "
        f"{median([c['prompt'] for c in cold])} prompt tokens, {args.repeats} repeats (a picture "
        f"each), greedy, {args.max_tokens} new tokens. TTFT is the client's. Answers identical "
        f"to the cold ones: {'yes' if identical else 'NO'}."
    )
    client.close()
    cache.cleanup()
    report(
        "Disk tier under a vision model: a picture's question after a restart vs cold",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
