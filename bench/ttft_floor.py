"""How much of a streamed chat's time to first token is the client's, the framework's and the
gateway's own, with no model work.

    .venv/bin/python bench/ttft_floor.py [--rounds 40]

Three servers, each in a process of its own, asked in turn by one httpx client (bench/common's
`stream_chat`, as bench/gpu/bench_gateway.py asks the gateway) with the same streamed chat,
timed to its first content chunk:

- `raw floor`: bench/http_floor.py, a bare asyncio server answering at once (the client,
  the loopback and the kernel);
- `litestar floor`: bench/http_floor.py --litestar, one litestar route under uvicorn's
  httptools protocol (the gateway's HTTP stack, none of its own code);
- `gateway`: `gateway serve` with a scripted model (`concurrency: 1`, reply "ok"): every
  middleware, check, event, the runner's queue and model thread, the template and tokenizer
  of the scripted engine, and the SSE frames.

Per side the median TTFT over rounds (round 0 a warm-up, the sides' order rotating), and
each side's per-round difference to the raw floor: what that layer adds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from common import Gateway, chat_body, fmt, median, percentile, report, stream_chat, table

HERE = Path(__file__).resolve().parent
CONFIG = """
server: {host: 127.0.0.1}
models:
  - id: ok
    engine: scripted
    script: {reply: "ok"}
    concurrency: 1
"""
MESSAGES = [{"role": "user", "content": "Say ok."}]
# The scripted reply is one word of two tokens, sent whole: a budget of one would send none.
MAX_TOKENS = 8


class Floor:
    """bench/http_floor.py in a process of its own; its URL once it listens."""

    def __init__(self, *flags: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "http_floor.py"), *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        port = json.loads(self.process.stdout.readline())["port"]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    load_before = os.getloadavg()

    gateway = Gateway(CONFIG, "ttft-floor")
    floors = {"raw floor": Floor(), "litestar floor": Floor("--litestar")}
    try:
        gateway.wait_ready()
        urls = {name: floor.url for name, floor in floors.items()} | {"gateway": gateway.url}
        sides = list(urls)
        ttft: dict[str, list[float]] = {s: [] for s in sides}
        with httpx.Client(timeout=60) as client:
            for round_ in range(args.rounds + 1):
                shift = round_ % len(sides)
                for side in sides[shift:] + sides[:shift]:
                    timing = stream_chat(client, urls[side], chat_body("ok", MESSAGES, MAX_TOKENS))
                    if not timing.first_token:
                        raise SystemExit(f"{side} streamed no content")
                    if round_:
                        ttft[side].append(timing.ttft * 1000)
    finally:
        gateway.stop()
        for floor in floors.values():
            floor.stop()

    rows = []
    for side in sides:
        added = [t - f for t, f in zip(ttft[side], ttft["raw floor"], strict=True)]
        rows.append(
            [
                side,
                fmt(median(ttft[side]), 3),
                f"{fmt(percentile(ttft[side], 10), 3)}-{fmt(percentile(ttft[side], 90), 3)}",
                fmt(median(added), 3) if side != "raw floor" else "-",
            ]
        )
    body = table(
        ["side", "TTFT ms (median)", "p10-p90", "added to the raw floor, ms (median per round)"],
        rows,
    )
    report(
        "Time to first token: the client's floor, the framework's, the gateway's",
        body,
        platform_path=None,
        load_before=load_before,
        notes=(
            f"{args.rounds} rounds after a warm-up, the three sides in turn (order rotating), "
            "one httpx client, a streamed chat timed to its first content chunk; the "
            "gateway's model is scripted (no model work)."
        ),
    )


if __name__ == "__main__":
    main()
