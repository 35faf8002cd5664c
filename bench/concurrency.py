"""Concurrency: aggregate tokens/s with 1, 4 and 8 concurrent streaming clients on one model,
the gateway (`concurrency: 8`, and `concurrency: 1` for reference) against mlx-lm's own
server on the same model in the same run.

    .venv/bin/python bench/concurrency.py [--repeats 3] [--max-tokens 64] [--clients 1 4 8]

mlx-lm's server runs twice: on a float32 copy of the model (what the gateway runs on the
CPU, written by `bench/float32_copy.py`) and on the 4-bit weights as stored. Every server
runs with OpenBLAS preloaded. Each round runs every client count on every server in turn,
so noise hits all of them; one warm-up request per server comes first. Every client sends
its own prompt (distinct per round) so no answer comes from a cache of an identical one.
Aggregate tokens/s = all new tokens / (last stream end - first request sent). Targets
(issue 5): 8 clients >= 4 x one client; gateway >= 1.2 x mlx-lm server's aggregate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx
from common import (
    REPO,
    SMOLLM2,
    Gateway,
    MlxLmServer,
    StreamTiming,
    astream_chat,
    chat_body,
    fmt,
    median,
    platform_env,
    report,
    table,
)

TOPICS = [
    "a lighthouse keeper",
    "a mountain village in winter",
    "a robot learning to paint",
    "a ship lost in a storm",
    "a baker who never sleeps",
    "a library on the moon",
    "a detective in an old city",
    "a garden that grows at night",
]

CONFIG = f"""
server: {{host: 127.0.0.1}}
models:
  - id: c8
    engine: mlx
    source: {SMOLLM2}
    context: {{max: 2048}}
    concurrency: 8
  - id: c1
    engine: mlx
    source: {SMOLLM2}
    context: {{max: 2048}}
    concurrency: 1
"""


class Target:
    """One server and model name to send the same requests to."""

    def __init__(self, label: str, url: str, model: str) -> None:
        self.label, self.url, self.model = label, url, model


def prompt(round_: int, client: int) -> list[dict]:
    topic = TOPICS[client % len(TOPICS)]
    return [
        {
            "role": "user",
            "content": f"Story {round_}-{client}: write a long story about {topic}, "
            "with many details.",
        }
    ]


async def burst(target: Target, clients: int, round_: int, max_tokens: int) -> dict:
    """`clients` concurrent streams; the aggregate and per-stream figures."""
    limits = httpx.Limits(max_connections=clients + 2, max_keepalive_connections=clients + 2)
    async with httpx.AsyncClient(timeout=900, limits=limits) as client:
        timings: list[StreamTiming] = await asyncio.gather(
            *(
                astream_chat(
                    client, target.url, chat_body(target.model, prompt(round_, i), max_tokens)
                )
                for i in range(clients)
            )
        )
    tokens = sum(t.new_tokens or 0 for t in timings)
    wall = max(t.ended for t in timings) - min(t.started for t in timings)
    return {
        "aggregate": tokens / wall,
        "tokens": tokens,
        "wall": wall,
        "ttft": median([t.ttft for t in timings]),
        "stream_tps": median([t.decode_tps for t in timings]),
    }


def float32_dir() -> Path:
    """mlx-lm's own save of the gateway's float32 expansion, cached beside converted GGUFs."""
    from engines.sources import default_cache_dir, resolve_source

    stored = resolve_source("bench", SMOLLM2)
    out = default_cache_dir() / "bench" / f"{stored.name}-float32"
    env = platform_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    subprocess.run(
        [sys.executable, str(REPO / "bench" / "float32_copy.py"), SMOLLM2, str(out)],
        check=True,
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--no-4bit", action="store_true", help="skip mlx-lm on 4-bit weights")
    args = parser.parse_args()
    load_before = os.getloadavg()

    from engines.sources import resolve_source

    stored_dir = resolve_source("bench", SMOLLM2)
    f32_dir = float32_dir()
    with ExitStack() as stack:
        gateway = stack.enter_context(Gateway(CONFIG, "concurrency"))
        mlx_f32 = stack.enter_context(MlxLmServer(f32_dir, "mlx-lm-f32"))
        targets = [
            Target("gateway, concurrency 8", gateway.url, "c8"),
            Target("gateway, concurrency 1", gateway.url, "c1"),
            Target("mlx-lm server, float32 copy", mlx_f32.url, "default_model"),
        ]
        if not args.no_4bit:
            mlx_q4 = stack.enter_context(MlxLmServer(stored_dir, "mlx-lm-q4"))
            targets.append(Target("mlx-lm server, 4-bit as stored", mlx_q4.url, "default_model"))
        for target in targets:  # warm-up: loads mlx-lm's model, compiles first shapes
            asyncio.run(burst(target, 1, -1, 8))
        results: dict[tuple[str, int], list[dict]] = {}
        for round_ in range(args.repeats):
            for clients in args.clients:
                for target in targets:
                    result = asyncio.run(burst(target, clients, round_, args.max_tokens))
                    results.setdefault((target.label, clients), []).append(result)
                    print(
                        f"round {round_} {target.label:32s} {clients} clients: "
                        f"{result['aggregate']:6.2f} tok/s aggregate "
                        f"({result['tokens']} tokens in {result['wall']:.1f} s)",
                        flush=True,
                    )
        platform_path = gateway.platform()

    def per_round(label: str, clients: int) -> list[float]:
        return [r["aggregate"] for r in results[(label, clients)]]

    lo, hi = min(args.clients), max(args.clients)
    rows = []
    for target in targets:
        for clients in args.clients:
            runs = results[(target.label, clients)]
            scale = [
                a / b
                for a, b in zip(
                    per_round(target.label, clients), per_round(target.label, lo), strict=True
                )
            ]
            rows.append(
                [
                    target.label,
                    clients,
                    fmt(median([r["aggregate"] for r in runs])),
                    fmt(median(scale), 2),
                    fmt(median([r["stream_tps"] for r in runs])),
                    fmt(median([r["ttft"] * 1000 for r in runs]), 0),
                ]
            )
    body = table(
        [
            "server",
            "clients",
            "aggregate tok/s (median)",
            f"x its own {lo}-client aggregate",
            "per-stream decode tok/s",
            "TTFT ms",
        ],
        rows,
    )
    gateway_label = targets[0].label
    versus = []
    for target in targets[2:]:
        for clients in args.clients:
            ratios = [
                a / b
                for a, b in zip(
                    per_round(gateway_label, clients), per_round(target.label, clients), strict=True
                )
            ]
            versus.append([f"{gateway_label} / {target.label}", clients, fmt(median(ratios), 2)])
    body += "\n\n" + table(["ratio (per round, side by side)", "clients", "median"], versus)
    scale_hi = median(
        [
            a / b
            for a, b in zip(per_round(gateway_label, hi), per_round(gateway_label, lo), strict=True)
        ]
    )
    notes = (
        f"{args.repeats} rounds, each running every client count on every server in turn; "
        f"greedy, max_tokens {args.max_tokens}, a distinct prompt per client and round. "
        f"Targets: {hi} clients >= 4 x one client (gateway, concurrency 8: "
        f"{fmt(scale_hi, 2)} x); gateway >= 1.2 x mlx-lm server's aggregate (table above, "
        f"{hi} clients against the float32 copy is the like-for-like line). mlx-lm server "
        f"{_mlx_lm_version()} with its defaults (decode concurrency 32, prompt cache on); "
        "the gateway's prefix reuse at its default."
    )
    report(
        "Concurrency: aggregate tokens/s, gateway vs mlx-lm server",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=notes,
    )


def _mlx_lm_version() -> str:
    from importlib.metadata import version

    return version("mlx-lm")


if __name__ == "__main__":
    main()
