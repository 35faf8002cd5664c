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

CONFIG = """
server: {{host: 127.0.0.1}}
models:
  - id: c8
    engine: mlx
    source: {source}
    context: {{max: 2048}}
    concurrency: 8
  - id: c1
    engine: mlx
    source: {source}
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
        "texts": [t.text for t in timings],
    }


def alternate(url: str, models: tuple[str, str], counts, rounds: int, max_tokens: int) -> dict:
    """The same bursts to two models of one gateway, order alternating by round; round 0
    warms up and is dropped. Per (model, clients): aggregate tok/s and TTFT ms per round;
    per clients: whether the two gave the same greedy texts in every round."""
    rates = {(m, n): [] for m in models for n in counts}
    ttfts = {(m, n): [] for m in models for n in counts}
    same = {n: True for n in counts}
    for round_ in range(rounds + 1):
        for n in counts:
            order = models if round_ % 2 == 0 else models[::-1]
            texts = {}
            for name in order:
                result = asyncio.run(burst(Target(name, url, name), n, round_, max_tokens))
                texts[name] = result["texts"]
                print(
                    f"round {round_} {n:4d} clients {name:9s} "
                    f"{result['aggregate']:9.1f} tok/s  ttft {1000 * result['ttft']:7.1f} ms",
                    flush=True,
                )
                if round_:
                    rates[(name, n)].append(result["aggregate"])
                    ttfts[(name, n)].append(1000 * result["ttft"])
            same[n] = same[n] and texts[models[0]] == texts[models[1]]
    return {"rates": rates, "ttfts": ttfts, "same": same}


def alternate_table(models: tuple[str, str], counts, result: dict) -> str:
    """`alternate`'s medians as a table: each model's tok/s, the ratio second / first, TTFT."""
    a, b = models
    rows = []
    for n in counts:
        first, second = median(result["rates"][(a, n)]), median(result["rates"][(b, n)])
        ttft = [median(result["ttfts"][(m, n)]) for m in models]
        rows.append(
            [
                n,
                f"{first:.1f}",
                f"{second:.1f}",
                f"{second / first:.3f}",
                f"{ttft[0]:.1f} / {ttft[1]:.1f}",
                "yes" if result["same"][n] else "no",
            ]
        )
    header = [
        "clients",
        f"{a} tok/s",
        f"{b} tok/s",
        f"{b} / {a}",
        f"TTFT ms {a} / {b}",
        "same greedy texts",
    ]
    return table(header, rows)


def float32_dir(source: str = SMOLLM2) -> Path:
    """mlx-lm's own save of the gateway's float32 expansion, cached beside converted GGUFs."""
    from engines.sources.resolve import default_cache_dir, resolve_source

    stored = resolve_source("bench", source)
    out = default_cache_dir() / "bench" / f"{stored.name}-float32"
    env = platform_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    subprocess.run(
        [sys.executable, str(REPO / "bench" / "float32_copy.py"), source, str(out)],
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
    parser.add_argument(
        "--4bit-rounds",
        dest="q4_rounds",
        type=int,
        default=1,
        help="rounds that include mlx-lm on 4-bit weights (it is slow; 1 shows the gap)",
    )
    parser.add_argument(
        "--source", default=SMOLLM2, help="the model source (any the gateway takes)"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()

    from engines.sources.resolve import resolve_source

    stored_dir = resolve_source("bench", args.source)
    f32_dir = float32_dir(args.source)
    q4_label = "mlx-lm server, 4-bit as stored"
    with ExitStack() as stack:
        gateway = stack.enter_context(Gateway(CONFIG.format(source=args.source), "concurrency"))
        mlx_f32 = stack.enter_context(MlxLmServer(f32_dir, "mlx-lm-f32"))
        targets = [
            Target("gateway, concurrency 8", gateway.url, "c8"),
            Target("gateway, concurrency 1", gateway.url, "c1"),
            Target("mlx-lm server, float32 copy", mlx_f32.url, "default_model"),
        ]
        if not args.no_4bit and args.q4_rounds > 0:
            mlx_q4 = stack.enter_context(MlxLmServer(stored_dir, "mlx-lm-q4"))
            targets.append(Target(q4_label, mlx_q4.url, "default_model"))
        # Warm-up (loads mlx-lm's model lazily, runs first shapes), and a check that every
        # server gives the same greedy answer to one prompt.
        warm = {t.label: asyncio.run(burst(t, 1, -1, 16))["texts"][0] for t in targets}
        same = [label for label, text in warm.items() if text == warm[targets[0].label]]
        # results[(label, clients)][round] -> one burst's figures
        results: dict[tuple[str, int], dict[int, dict]] = {}
        for round_ in range(args.repeats):
            for clients in args.clients:
                for target in targets:
                    if target.label == q4_label and round_ >= args.q4_rounds:
                        continue
                    result = asyncio.run(burst(target, clients, round_, args.max_tokens))
                    results.setdefault((target.label, clients), {})[round_] = result
                    print(
                        f"round {round_} {target.label:32s} {clients} clients: "
                        f"{result['aggregate']:6.2f} tok/s aggregate "
                        f"({result['tokens']} tokens in {result['wall']:.1f} s)",
                        flush=True,
                    )
        platform_path = gateway.platform()
        decoding = gateway.decoding()

    def ratio(a: tuple[str, int], b: tuple[str, int]) -> float | None:
        """Median over the rounds both ran of aggregate(a) / aggregate(b), side by side."""
        rounds = results[a].keys() & results[b].keys()
        return median([results[a][r]["aggregate"] / results[b][r]["aggregate"] for r in rounds])

    lo, hi = min(args.clients), max(args.clients)
    rows = []
    for target in targets:
        for clients in args.clients:
            runs = list(results[(target.label, clients)].values())
            rows.append(
                [
                    target.label,
                    clients,
                    len(runs),
                    fmt(median([r["aggregate"] for r in runs])),
                    fmt(ratio((target.label, clients), (target.label, lo)), 2),
                    fmt(median([r["stream_tps"] for r in runs])),
                    fmt(median([r["ttft"] * 1000 for r in runs]), 0),
                ]
            )
    body = table(
        [
            "server",
            "clients",
            "rounds",
            "aggregate tok/s (median)",
            f"x its own {lo}-client aggregate",
            "per-stream decode tok/s",
            "TTFT ms",
        ],
        rows,
    )
    gateway_label = targets[0].label
    versus = [
        [f"{gateway_label} / {t.label}", c, fmt(ratio((gateway_label, c), (t.label, c)), 2)]
        for t in targets[2:]
        for c in args.clients
    ]
    body += "\n\n" + table(["ratio (per round, side by side)", "clients", "median"], versus)
    scale_hi = ratio((gateway_label, hi), (gateway_label, lo))
    notes = (
        f"Gateway models as attached: {decoding}. "
        f"{args.repeats} rounds, each running every client count on every server in turn "
        f"(mlx-lm on 4-bit weights in the first {args.q4_rounds} only); greedy, max_tokens "
        f"{args.max_tokens}, a distinct prompt per client and round. Targets: {hi} clients "
        f">= 4 x one client (gateway, concurrency 8: {fmt(scale_hi, 2)} x); gateway >= 1.2 x "
        f"mlx-lm server's aggregate ({hi} clients against the float32 copy is the "
        f"like-for-like line). mlx-lm server {_mlx_lm_version()} with its defaults (decode "
        "concurrency 32, prompt cache on); the gateway's prefix reuse at its default. Same "
        f"greedy 16-token answer as the gateway on the warm-up prompt: {', '.join(same)}."
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
