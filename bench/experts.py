"""Experts on disk (`experts:`): decode tokens/s and time to first token through the gateway
with 100 %, 50 %, 25 % and 12.5 % of each layer's experts resident, against the same model
loaded whole, at 1 and 8 streams, with the expert cache's hit rate.

    .venv/bin/python bench/experts.py [--shape tiny] [--tokens 48] [--rounds 3]
        [--dtype float32] [--budget GIB] [--tokenizer DIR]

The model is the test-built qwen3_moe (engines/mlx/experts/demo.py: seeded random weights,
experts most of its bytes, a router skewed as trained ones are), built once in a temporary
directory. The whole model's gateway (no `experts:`) stays up through the run; each level
is a gateway of its own on the same model directory (`experts: {resident: N, policy:
lru}`), warmed by one request; then `--rounds` rounds of one stream alone and of 8 streams
together, each stream `--tokens` greedy tokens of a prompt of its own, each round run on the
level's gateway and then on the whole model's, so a ratio compares rounds that met the same
load. Figures are medians over the rounds' streams; the hit rate is the cache's own
count (`/metrics` `gateway_experts_hits_total` and `_misses_total`) over the measured
requests. On the CPU the files are in the page cache after the first read: a miss costs a
`pread` and a copy, not a disk's latency; a GPU run under a budget below the weights is
the issue's other half: `--shape a3b-12l --dtype bfloat16 --budget 8` (Qwen3-30B-A3B's
proportions on 12 layers, ~15 GB) adds an `auto` level, a gateway whose `memory_budget` is
below the weights, sized by `experts: {resident: auto}` (bench/gpu/platform.sh runs it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import tempfile
from pathlib import Path

import httpx
from common import Gateway, astream_chat, chat_body, fmt, median, report, table

from engines.mlx.experts.demo import SHAPES, make_moe

FRACTIONS = (1.0, 0.5, 0.25, 0.125)
PROMPTS = [
    "Tell me about cats.", "What is the capital of France?", "Write a haiku on rain.",
    "Explain photosynthesis.", "Name three rivers.", "How do magnets work?",
    "Describe a sunset.", "Why is the sky blue?",
]  # fmt: skip


def config(model_dir: Path, resident: int | str | None, budget: float | None = None) -> str:
    experts = "" if resident is None else f"\n    experts: {{resident: {resident}, policy: lru}}"
    server = "" if budget is None else f"server:\n  memory_budget: {budget}GiB\n"
    return f"""
{server}models:
  - id: moe
    source: {model_dir}
    context: {{max: 512}}
    concurrency: 8{experts}
"""


def counts(gateway: Gateway) -> tuple[float, float]:
    text = httpx.get(f"{gateway.url}/metrics", timeout=10).text

    def value(name: str) -> float:
        found = re.search(rf'^gateway_experts_{name}_total{{model="moe"}} (\S+)$', text, re.M)
        return float(found.group(1)) if found else 0.0

    return value("hits"), value("misses")


async def burst(url: str, streams: int, tokens: int, offset: int):
    async with httpx.AsyncClient(timeout=300) as client:
        bodies = [
            chat_body(
                "moe", [{"role": "user", "content": PROMPTS[(offset + i) % len(PROMPTS)]}], tokens
            )
            for i in range(streams)
        ]
        return await asyncio.gather(*(astream_chat(client, url, body) for body in bodies))


def one_round(gateway: Gateway, streams: int, tokens: int, offset: int) -> tuple:
    """(median decode tok/s, median TTFT s) of one round of `streams` streams."""
    timings = asyncio.run(burst(gateway.url, streams, tokens, offset))
    return median([t.decode_tps for t in timings]), median([t.ttft for t in timings])


def level(whole: Gateway, model_dir: Path, resident, tokens: int, rounds: int, budget=None) -> dict:
    """Rounds on this level's gateway and on the whole model's, alternated (both meet the
    same load on a shared machine); the ratio is taken round by round."""
    with Gateway(config(model_dir, resident, budget), "experts") as gateway:
        asyncio.run(burst(gateway.url, 1, 8, 0))  # warm: the first step's allocations
        before = counts(gateway)
        out = {}
        for streams in (1, 8):
            mine, base, ratios = [], [], []
            for r in range(rounds):
                got = one_round(gateway, streams, tokens, r)
                ref = one_round(whole, streams, tokens, r)
                mine.append(got)
                base.append(ref)
                if got[0] and ref[0]:
                    ratios.append(got[0] / ref[0])
            out[streams] = {
                "tps": median([m[0] for m in mine]),
                "ttft": median([m[1] for m in mine]),
                "base_tps": median([b[0] for b in base]),
                "base_ttft": median([b[1] for b in base]),
                "ratio": median(ratios),
                "spread": (min(ratios), max(ratios)) if ratios else (None, None),
            }
        hits, misses = (a - b for a, b in zip(counts(gateway), before, strict=True))
        out["hit_rate"] = hits / (hits + misses) if hits + misses else None
        attached = gateway.events("model_attached")[-1]
        out["memory"] = attached["memory_bytes"]
        out["resident"] = attached["detail"].get("experts_resident", str(resident))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="float32", help="the built model's weights")
    parser.add_argument("--tokenizer", type=Path, help="SmolLM2's tokenizer files (on the GPU)")
    parser.add_argument(
        "--budget", type=float, help="GiB: add an `auto` level under this memory_budget"
    )
    parser.add_argument(
        "--levels", type=float, nargs="+", default=[f * 100 for f in FRACTIONS],
        help="resident percentages to measure",
    )  # fmt: skip
    parser.add_argument(
        "--all-but-one", action="store_true",
        help="add a level with every expert but one resident: the host-synced path's own cost "
        "(one sync a MoE layer) at nearly no misses, beside 100 %'s sync-free path",
    )  # fmt: skip
    args = parser.parse_args()
    load_before = os.getloadavg()
    experts = SHAPES[args.shape]["num_experts"]
    with tempfile.TemporaryDirectory(prefix="bench-moe-") as folder:
        model_dir = make_moe(Path(folder), args.shape, args.dtype, tokenizer=args.tokenizer)
        rows = []
        with Gateway(config(model_dir, None), "whole") as whole:
            asyncio.run(burst(whole.url, 1, 8, 0))
            whole_memory = whole.events("model_attached")[-1]["memory_bytes"]
            platform_path = whole.platform()
            levels = [(f"{p:g} %", max(1, round(experts * p / 100)), None) for p in args.levels]
            if args.all_but_one:
                levels.insert(1, ("all but one", experts - 1, None))
            if args.budget:
                levels.append((f"auto, budget {args.budget:g} GiB", "auto", args.budget))
            for name, resident, budget in levels:
                got = level(whole, model_dir, resident, args.tokens, args.rounds, budget)
                for streams in (1, 8):
                    m = got[streams]
                    low, high = m["spread"]
                    rows.append([
                        f"{name} ({got['resident']})", streams,
                        fmt(m["tps"], 1), fmt(m["base_tps"], 1),
                        f"{fmt(m['ratio'], 3)} ({fmt(low, 2)}-{fmt(high, 2)})",
                        fmt(m["ttft"] * 1000, 0), fmt(m["base_ttft"] * 1000, 0),
                        fmt(got["hit_rate"] * 100 if got["hit_rate"] is not None else None, 1),
                        f"{got['memory'] / 2**20:.1f} / {whole_memory / 2**20:.1f}",
                    ])  # fmt: skip
                    print(" | ".join(map(str, rows[-1])), flush=True)  # kept if cut off
    body = table(
        ["resident", "streams", "decode tok/s", "whole model tok/s", "ratio (spread)",
         "TTFT ms", "whole TTFT ms", "hit rate %", "MiB held / whole"],
        rows,
    )  # fmt: skip
    report(
        f"Experts on disk: decode and TTFT by resident fraction ({args.shape} qwen3_moe, "
        f"{args.dtype}, {platform_path.get('device', 'cpu')})",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=(
            f"{args.rounds} rounds of {args.tokens} greedy tokens a stream, each round on the "
            "level's gateway then on the whole model's (both up together); medians, the ratio "
            "the median of the rounds' ratios and its spread their lowest-highest; hit rate over "
            "the measured requests of both stream counts; the expert files are in the page "
            "cache (a miss is a pread and a copy)."
        ),
    )


if __name__ == "__main__":
    main()
