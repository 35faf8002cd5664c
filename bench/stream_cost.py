"""CPU the gateway spends per streamed SSE chunk, its event loop's share apart.

    .venv/bin/python bench/stream_cost.py [--clients 32] [--words 300] [--token-delay 0.0003]
        [--rounds 3]

On a GPU a batch of 128 sequences makes a token per stream every few milliseconds, and the
event loop turns each into an SSE chunk on the same GIL the model thread needs (issue 12:
through HTTP the gateway's batch decoded at about half the speed it reaches in a plain
process). This measures that per-chunk work without a model: a scripted model with
`concurrency: clients` streams `words` words to each of `clients` streaming clients, one
word per sequence each `token-delay` seconds (paced, so the event loop keeps up and sends
one chunk per word, as behind a GPU batch). Reported per chunk received: the gateway
process's CPU time (every thread) and its main thread's (the event loop), from
/proc/PID/stat and /proc/PID/task/PID/stat before and after each round. The clients run on
the same cores; their CPU is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import httpx
from common import Gateway, chat_body, cpu_seconds, median, report, table


async def stream_one(client: httpx.AsyncClient, url: str, i: int) -> int:
    """One streamed chat; how many data chunks it brought."""
    body = chat_body("s", [{"role": "user", "content": f"hi {i}"}], 4096)
    chunks = 0
    async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            chunks += line.startswith("data: {")
    return chunks


async def burst(url: str, clients: int) -> int:
    limits = httpx.Limits(max_connections=clients + 2, max_keepalive_connections=clients + 2)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        return sum(await asyncio.gather(*(stream_one(client, url, i) for i in range(clients))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--words", type=int, default=300)
    parser.add_argument("--token-delay", type=float, default=0.0003)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    reply = " ".join(f"w{i}" for i in range(args.words))
    config = f"""
server: {{host: 127.0.0.1}}
models:
  - id: s
    engine: scripted
    concurrency: {args.clients}
    script: {{reply: "{reply}", token_delay: {args.token_delay}}}
"""
    load_before = os.getloadavg()
    rows, process_us, loop_us = [], [], []
    with Gateway(config) as gateway:
        pid = gateway.process.pid
        asyncio.run(burst(gateway.url, args.clients))  # warm-up
        for round_ in range(args.rounds):
            before = cpu_seconds(pid), cpu_seconds(pid, pid), time.perf_counter()
            chunks = asyncio.run(burst(gateway.url, args.clients))
            after = cpu_seconds(pid), cpu_seconds(pid, pid), time.perf_counter()
            process_us.append(1e6 * (after[0] - before[0]) / chunks)
            loop_us.append(1e6 * (after[1] - before[1]) / chunks)
            rows.append(
                [
                    round_ + 1,
                    chunks,
                    f"{after[2] - before[2]:.2f}",
                    f"{process_us[-1]:.1f}",
                    f"{loop_us[-1]:.1f}",
                ]
            )
        platform_path = gateway.platform()
    rows.append(["median", "", "", f"{median(process_us):.1f}", f"{median(loop_us):.1f}"])
    body = table(
        ["round", "chunks", "wall s", "process CPU µs / chunk", "event loop CPU µs / chunk"],
        rows,
    )
    notes = (
        f"{args.clients} streaming clients, {args.words} words each, one word per sequence "
        f"every {args.token_delay} s (scripted engine); the clients share the cores."
    )
    report(
        "Streaming cost: gateway CPU per SSE chunk",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
