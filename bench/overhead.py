"""Gateway overhead: requests/s and latency on the scripted engine (no model work at all).

    .venv/bin/python bench/overhead.py [--requests 400] [--rounds 4]

A scripted model (`script: {reply: "ok"}`, `concurrency: 8`) answers non-streamed
`/v1/chat/completions` requests with `max_tokens: 1`, so what is measured is the gateway:
HTTP, body validation, routing, the runner's queue and thread hop, the template and
tokenizer of the scripted engine, events and the response. Async httpx clients keep 1 or 8
requests in flight; the `--requests` of each level are split into `--rounds` rounds,
interleaved 1, 8, 1, 8, ... so noise hits both. The client runs on the same cores as the
gateway, so the gateway's own `duration_ms` (from `request_finished`) is shown beside the
client's latency.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import httpx
from common import Gateway, fmt, median, percentile, report, table

CONFIG = """
server: {host: 127.0.0.1}
models:
  - id: ok
    engine: scripted
    script: {reply: "ok"}
    concurrency: 8
    queue: {max_depth: 64}
"""
BODY = {
    "model": "ok",
    "messages": [{"role": "user", "content": "Say ok."}],
    "max_tokens": 1,
}
LEVELS = (1, 8)


async def run_round(url: str, clients: int, requests: int) -> tuple[float, list[tuple]]:
    """`requests` requests over `clients` workers: (wall seconds, [(latency, request id)])."""
    remaining = iter(range(requests))
    samples: list[tuple[float, str]] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def worker() -> None:
            for _ in remaining:
                started = time.perf_counter()
                response = await client.post("/v1/chat/completions", json=BODY)
                latency = time.perf_counter() - started
                response.raise_for_status()
                samples.append((latency, response.headers.get("x-request-id")))

        # Connections are opened by a first request each, outside the timed window.
        opening = (client.post("/v1/chat/completions", json=BODY) for _ in range(clients))
        await asyncio.gather(*opening)
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - started
    return wall, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="per concurrency level")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    load_before = os.getloadavg()
    per_round = max(1, args.requests // args.rounds)

    rates: dict[int, list[float]] = {level: [] for level in LEVELS}
    samples: dict[int, list[tuple[float, str]]] = {level: [] for level in LEVELS}
    with Gateway(CONFIG, "overhead") as gateway:
        asyncio.run(run_round(gateway.url, 1, 20))  # warm-up
        for round_ in range(args.rounds):
            for level in LEVELS:
                wall, got = asyncio.run(run_round(gateway.url, level, per_round))
                rates[level].append(len(got) / wall)
                samples[level] += got
                print(
                    f"round {round_} concurrency {level}: {len(got) / wall:7.1f} req/s",
                    flush=True,
                )
        time.sleep(0.5)  # the last request_finished lines reach the log
        finished = {
            e.get("request_id"): e.get("duration_ms") for e in gateway.events("request_finished")
        }
        platform_path = gateway.platform()

    rows = []
    for level in LEVELS:
        latencies = [s[0] * 1000 for s in samples[level]]
        server = [finished[rid] for _, rid in samples[level] if finished.get(rid) is not None]
        rows.append(
            [
                level,
                len(latencies),
                fmt(median(rates[level]), 0),
                fmt(percentile(latencies, 50)),
                fmt(percentile(latencies, 99)),
                fmt(percentile(server, 50)) if server else "n/a",
                fmt(percentile(server, 99)) if server else "n/a",
            ]
        )
    body = table(
        [
            "clients in flight",
            "requests",
            "requests/s (median of rounds)",
            "client p50 ms",
            "client p99 ms",
            "gateway duration_ms p50",
            "gateway duration_ms p99",
        ],
        rows,
    )
    notes = (
        f"{args.rounds} rounds of {per_round} requests per level, interleaved; non-streamed "
        'chat completions, max_tokens 1, scripted reply "ok"; async httpx client on the '
        "same machine (it shares the cores with the gateway). No target in the issue: this "
        "is the floor every real request pays on top of the model's own time."
    )
    report(
        "Gateway overhead: scripted engine",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
