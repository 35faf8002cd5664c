"""`isolation: process` against the model on a thread of the gateway, in one gateway.

    .venv/bin/python bench/isolation.py [--source SOURCE] [--clients 1,32,128] [--rounds 3]
        [--max-tokens 128] [--context 1024]

Two models on the same source in one `gateway serve`: `threaded` (the default) and
`isolated` (`isolation: process`), each with `concurrency` = the largest client count.
Per round and client count, the same burst of streaming clients goes to each (order
alternating by round); reported: aggregate tok/s medians (the gateway's own token counts),
the ratio isolated / threaded, median TTFT, and whether the greedy texts were the same.
Round 0 warms up and is dropped. Runs anywhere the gateway does (CPU, Metal, CUDA); on a
fast GPU the threaded model shares the GIL with HTTP, which is what isolation removes.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from common import SMOLLM2, Gateway, median, report, table
from concurrency import Target, burst


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", default=SMOLLM2)
    parser.add_argument("--clients", default="1,32,128")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--context", type=int, default=1024)
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    models = ("threaded", "isolated")
    entries = "".join(
        f"""
  - id: {name}
    source: {args.source}
    concurrency: {max(counts)}
    context: {{max: {args.context}}}
    isolation: {"process" if name == "isolated" else "none"}"""
        for name in models
    )
    load_before = os.getloadavg()
    rates = {(m, n): [] for m in models for n in counts}
    ttfts = {(m, n): [] for m in models for n in counts}
    same = {n: True for n in counts}
    with Gateway(f"server: {{host: 127.0.0.1}}\nmodels:{entries}\n", "isolation") as gateway:
        for round_ in range(args.rounds + 1):
            for n in counts:
                order = models if round_ % 2 == 0 else models[::-1]
                texts = {}
                for name in order:
                    result = asyncio.run(
                        burst(Target(name, gateway.url, name), n, round_, args.max_tokens)
                    )
                    texts[name] = result["texts"]
                    print(
                        f"round {round_} {n:4d} clients {name:9s} "
                        f"{result['aggregate']:9.1f} tok/s  ttft {1000 * result['ttft']:7.1f} ms",
                        flush=True,
                    )
                    if round_:
                        rates[(name, n)].append(result["aggregate"])
                        ttfts[(name, n)].append(1000 * result["ttft"])
                same[n] = same[n] and texts["threaded"] == texts["isolated"]
        platform_path = gateway.platform()
        decoding = gateway.decoding()
    rows = []
    for n in counts:
        threaded, isolated = median(rates[("threaded", n)]), median(rates[("isolated", n)])
        rows.append(
            [
                n,
                f"{threaded:.1f}",
                f"{isolated:.1f}",
                f"{isolated / threaded:.3f}",
                f"{median(ttfts[('threaded', n)]):.1f} / {median(ttfts[('isolated', n)]):.1f}",
                "yes" if same[n] else "no",
            ]
        )
    body = table(
        [
            "clients",
            "threaded tok/s",
            "isolated tok/s",
            "isolated / threaded",
            "TTFT ms threaded / isolated",
            "same greedy texts",
        ],
        rows,
    )
    report(
        "Isolation: model process vs model thread",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=f"source {args.source}, {args.max_tokens} new tokens, {args.rounds} rounds after "
        f"a warm-up, medians; {decoding}",
    )


if __name__ == "__main__":
    main()
