"""Concurrency: aggregate tokens/s with 1, 4 and 8 concurrent streaming clients on one model,
the gateway (`concurrency: 8`, and `concurrency: 1` for reference) against mlx-lm's own
server on the same model in the same run.

    .venv/bin/python bench/concurrency.py [--repeats 3] [--max-tokens 64] [--clients 1 4 8]

mlx-lm's server runs twice: on a float32 copy of the model (what the gateway runs on the
CPU, written by `bench/float32_copy.py`) and on the 4-bit weights as stored. Every server
runs with OpenBLAS preloaded. Raw mlx-lm `BatchGenerator` (bench/gpu/raw_batch.py, in a
process of its own, the weights held as the gateway holds them) decodes the same prompts all
at once: its own N-client / 1-client ratio is what batching gives on this machine, the
ceiling against which the gateway's is read. `--at REV` adds the gateway of another commit
(its tree from `git archive`), to find a regression in the same run. Each round runs every
client count on every server in turn, so noise hits all of them; one warm-up request per
server comes first. Every client sends its own prompt (distinct per round) so no answer
comes from a cache of an identical one.
Aggregate tokens/s = all new tokens / (last stream end - first request sent). Targets
(issue 5): 8 clients >= 4 x one client; gateway >= 1.2 x mlx-lm server's aggregate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import httpx
from common import (
    REPO,
    SMOLLM2,
    Gateway,
    MlxLmServer,
    StreamTiming,
    Worker,
    astream_chat,
    chat_body,
    cpu_seconds,
    fmt,
    median,
    platform_env,
    report,
    table,
    tree_at,
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
    """One server and model name to send the same requests to; `pid` its process."""

    def __init__(self, label: str, url: str, model: str, pid: int | None = None) -> None:
        self.label, self.url, self.model, self.pid = label, url, model, pid


def process_cpu(pid: int | None) -> float | None:
    """`common.cpu_seconds` of a process, None where there is none to read."""
    try:
        return cpu_seconds(pid)
    except (OSError, TypeError):
        return None


class RawBatch:
    """Raw mlx-lm `BatchGenerator` on the same prompts: bench/gpu/raw_batch.py in a process
    of its own, loaded as the gateway loads the model (float32 on the CPU), one JSON line
    per burst. Its clock runs from `insert` to the last token (no HTTP, no tokenizing)."""

    label = "raw BatchGenerator (in process)"

    def __init__(self, model_dir: Path) -> None:
        self._worker = Worker(REPO / "bench" / "gpu" / "raw_batch.py", str(model_dir), str(REPO))
        self.weights = self._worker.ready["weights"]
        self.pid = self._worker.process.pid

    def burst(self, clients: int, round_: int, max_tokens: int) -> dict:
        """`clients` prompts inserted at once (prefill batch = all of them), decoded together."""
        result = self._worker.ask({"clients": clients, "max_tokens": max_tokens, "round": round_})
        # Every sequence decodes in every step: a stream's rate is the steps after the first
        # token over their time (when none stopped early, so every step had them all).
        full = result["tokens"] == clients * max_tokens
        decode = result["wall"] - result["ttft"]
        stream_tps = (max_tokens - 1) / decode if full and decode > 0 else None
        return {**result, "stream_tps": stream_tps, "texts": None}

    def __enter__(self) -> RawBatch:
        return self

    def __exit__(self, *exc) -> None:
        self._worker.stop()


def run_burst(target: Target | RawBatch, clients: int, round_: int, max_tokens: int) -> dict:
    """One burst on `target`, with the CPU its process spent on it per new token: the work
    it did, which the other processes of a shared machine do not change as they change the
    wall clock."""
    before = process_cpu(target.pid)
    if isinstance(target, RawBatch):
        result = target.burst(clients, round_, max_tokens)
    else:
        result = asyncio.run(burst(target, clients, round_, max_tokens))
    after = process_cpu(target.pid)
    spent = None if before is None or after is None else after - before
    result["cpu_ms_per_token"] = 1000 * spent / result["tokens"] if spent is not None else None
    return result


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


def alternate_options(parser: argparse.ArgumentParser, *, clients: str, max_tokens: int) -> None:
    """The options every comparison by `alternate` takes: the source both models load, the
    client counts, the rounds, the new tokens and the context window."""
    parser.add_argument("--source", default=SMOLLM2)
    parser.add_argument("--clients", default=clients)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=max_tokens)
    parser.add_argument("--context", type=int, default=1024)


def alternate_config(args: argparse.Namespace, settings: dict[str, str]) -> str:
    """One gateway's YAML for `alternate`: a model per entry of `settings` (its id, its own
    line of settings), each on `args.source`, its window `args.context` and its
    `concurrency` the largest of `args.clients`."""
    counts = [int(c) for c in args.clients.split(",")]
    entries = "".join(
        f"""
  - id: {name}
    source: {args.source}
    concurrency: {max(counts)}
    context: {{max: {args.context}}}
    {line}"""
        for name, line in settings.items()
    )
    return f"server: {{host: 127.0.0.1}}\nmodels:{entries}\n"


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
    parser.add_argument("--no-mlx-lm", action="store_true", help="skip mlx-lm's servers")
    parser.add_argument("--no-serial", action="store_true", help="skip the concurrency-1 model")
    parser.add_argument("--no-raw", action="store_true", help="skip raw BatchGenerator")
    parser.add_argument(
        "--at", metavar="REV", help="also run the gateway of commit REV (its concurrency-8 model)"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()

    from engines.sources.resolve import resolve_source

    stored_dir = resolve_source("bench", args.source)
    q4_label = "mlx-lm server, 4-bit as stored"
    config = CONFIG.format(source=args.source)
    with ExitStack() as stack:
        gateway = stack.enter_context(Gateway(config, "concurrency"))
        targets: list[Target | RawBatch] = [
            Target("gateway, concurrency 8", gateway.url, "c8", gateway.process.pid)
        ]
        if not args.no_serial:
            targets.append(Target("gateway, concurrency 1", gateway.url, "c1", gateway.process.pid))
        if args.at:
            code = tree_at(args.at, Path(stack.enter_context(tempfile.TemporaryDirectory())))
            older = stack.enter_context(Gateway(config, "concurrency-at", code=code))
            targets.append(
                Target(f"gateway at {args.at}, concurrency 8", older.url, "c8", older.process.pid)
            )
        if not args.no_raw:
            targets.append(stack.enter_context(RawBatch(stored_dir)))
        if not args.no_mlx_lm:
            mlx_f32 = stack.enter_context(MlxLmServer(float32_dir(args.source), "mlx-lm-f32"))
            targets.append(
                Target(
                    "mlx-lm server, float32 copy", mlx_f32.url, "default_model", mlx_f32.process.pid
                )
            )
            if not args.no_4bit and args.q4_rounds > 0:
                mlx_q4 = stack.enter_context(MlxLmServer(stored_dir, "mlx-lm-q4"))
                targets.append(Target(q4_label, mlx_q4.url, "default_model", mlx_q4.process.pid))
        # Warm-up (loads mlx-lm's model lazily, runs first shapes), and a check that every
        # server gives the same greedy answer to one prompt.
        servers = [t for t in targets if isinstance(t, Target)]
        warm = {t.label: asyncio.run(burst(t, 1, -1, 16))["texts"][0] for t in servers}
        same = [label for label, text in warm.items() if text == warm[targets[0].label]]
        for raw in (t for t in targets if isinstance(t, RawBatch)):
            raw.burst(max(args.clients), -1, 16)
        # results[(label, clients)][round] -> one burst's figures
        results: dict[tuple[str, int], dict[int, dict]] = {}
        for round_ in range(args.repeats):
            for clients in args.clients:
                for target in targets:
                    if target.label == q4_label and round_ >= args.q4_rounds:
                        continue
                    result = run_burst(target, clients, round_, args.max_tokens)
                    results.setdefault((target.label, clients), {})[round_] = result
                    print(
                        f"round {round_} {target.label:32s} {clients} clients: "
                        f"{result['aggregate']:6.2f} tok/s aggregate "
                        f"({result['tokens']} tokens in {result['wall']:.1f} s)",
                        flush=True,
                    )
        platform_path = gateway.platform()
        decoding = gateway.decoding()

    def ratios(a: tuple[str, int], b: tuple[str, int]) -> list[float]:
        """aggregate(a) / aggregate(b) in each round both ran, side by side."""
        rounds = sorted(results[a].keys() & results[b].keys())
        return [results[a][r]["aggregate"] / results[b][r]["aggregate"] for r in rounds]

    def ratio(a: tuple[str, int], b: tuple[str, int]) -> float | None:
        return median(ratios(a, b))

    def spread(a: tuple[str, int], b: tuple[str, int]) -> str:
        """The median per-round ratio and its range over the rounds."""
        each = ratios(a, b)
        return f"{fmt(median(each), 2)} ({fmt(min(each), 2)}-{fmt(max(each), 2)})"

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
                    spread((target.label, clients), (target.label, lo)),
                    fmt(median([r["stream_tps"] for r in runs])),
                    fmt(median([r["ttft"] * 1000 for r in runs]), 0),
                    fmt(median([r["cpu_ms_per_token"] for r in runs]), 1),
                ]
            )
    body = table(
        [
            "server",
            "clients",
            "rounds",
            "aggregate tok/s (median)",
            f"x its own {lo}-client aggregate (median of rounds, range)",
            "per-stream decode tok/s",
            "TTFT ms",
            "process CPU ms per token",
        ],
        rows,
    )
    gateway_label = targets[0].label
    versus = [
        [f"{gateway_label} / {t.label}", c, spread((gateway_label, c), (t.label, c))]
        for t in targets[1:]
        if t.label != "gateway, concurrency 1"
        for c in args.clients
    ]
    body += "\n\n" + table(["ratio (per round, side by side)", "clients", "median (range)"], versus)
    scale_hi = ratio((gateway_label, hi), (gateway_label, lo))
    raw_scale = ""
    if not args.no_raw:
        ceiling = ratio((RawBatch.label, hi), (RawBatch.label, lo))
        raw_scale = (
            f"Raw BatchGenerator's own {hi}/{lo}-client ratio, the machine's ceiling for "
            f"these prompts: {fmt(ceiling, 2)} x (gateway's {fmt(scale_hi, 2)} x). "
        )
    mlx_lm = (
        ""
        if args.no_mlx_lm
        else f"gateway >= 1.2 x mlx-lm server's aggregate ({hi} clients against the float32 "
        f"copy is the like-for-like line; mlx-lm on 4-bit weights in the first "
        f"{args.q4_rounds} rounds only). mlx-lm server {_mlx_lm_version()} with its defaults "
        "(decode concurrency 32, prompt cache on). "
    )
    notes = (
        f"Gateway models as attached: {decoding}. "
        f"{args.repeats} rounds, each running every client count on every side in turn; "
        f"greedy, max_tokens {args.max_tokens}, a distinct prompt per client and round. "
        "Process CPU per token: user + system time of the side's whole process over the "
        "burst (HTTP, tokenizing, model) / new tokens; unlike the wall clock, the load of "
        f"other processes leaves it mostly alone. Targets: {hi} clients >= 4 x one client "
        "(gateway, concurrency 8: "
        f"{fmt(scale_hi, 2)} x); {mlx_lm}The gateway's prefix reuse at its default. Same "
        f"greedy 16-token answer as the gateway on the warm-up prompt: {', '.join(same)}. "
        + raw_scale
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
