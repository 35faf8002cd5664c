"""Adapters (`adapters:`, docs/adapters.md): aggregate tokens/s of 4 adapters x 4 streams
mixed in one batch against the same number of streams on the base alone, and the memory
one base with 4 adapters holds against 4 fused copies of the model.

    .venv/bin/python bench/lora.py [--repeats 3] [--max-tokens 32] [--adapters 4] [--streams 4]

Two gateways on SmolLM2-135M (the embedded GGUF, as the shipped config serves it), up at
once: `plain`, the model without adapters, and `adapted`, the same model with `--adapters`
seeded random LoRA adapters in mlx-lm's format (rank 8 on every layer's q_proj and v_proj,
as `mlx_lm.lora` adapts by default), `concurrency` = adapters x streams on both. Each round
sends, in turn: `base xS` (S streams on `plain`), `base xA*S` (A*S streams on `plain`) and
`mixed` (S streams to each adapter of `adapted`, all at once: one batch of rows under A
different adapters). Every stream has its own prompt; tokens are the gateway's own counts
(the usage chunk). Both gateways run with `prefix_reuse: false` and `disk_cache: false`:
rows under an adapter park no prefix and write no disk blocks, so the base's rows would do
work the adapters' skip. Aggregate tokens/s = all new tokens / (last stream end - first request
sent); the table gives each one's median over the rounds and the mixed/base ratios (goal
in issue 52: >= 0.8 against the base at the same number of streams).

Memory: the base's weights as held (float32 on the CPU) and the adapters' stacked matrices,
as the adapted gateway's `model_attached` says (`adapter_bytes`); a fused copy holds what
the base holds, so A fused models hold A times its weights; the KV cache of the same
streams is the same either way (the last column adds the plain gateway's to each). The
tokens/s of A fused models under one budget is not measured here (A loads of the base).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import httpx
from common import SMOLLM2, Gateway, astream_chat, chat_body, fmt, median, report, table

HIDDEN, KV, LAYERS, RANK = 576, 192, 30, 8  # SmolLM2-135M's q_proj and v_proj
TOPICS = [
    "a lighthouse", "a winter village", "a painting robot", "a lost ship", "a baker",
    "a moon library", "an old city", "a night garden", "a desert train", "a clock maker",
    "a river town", "a glass tower", "a paper boat", "a quiet forest", "a red kite",
    "a salt mine", "a brass band", "a snow fox", "a tin soldier", "a sea cave",
]  # fmt: skip


def write_adapter(directory: Path, seed: int) -> None:
    import mlx.core as mx

    mx.random.seed(seed)
    weights = {}
    for layer in range(LAYERS):
        for name, out in (("q_proj", HIDDEN), ("v_proj", KV)):
            stem = f"model.layers.{layer}.self_attn.{name}"
            weights[f"{stem}.lora_a"] = mx.random.normal((HIDDEN, RANK)) * 0.02
            weights[f"{stem}.lora_b"] = mx.random.normal((RANK, out)) * 0.02
    directory.mkdir(parents=True)
    mx.save_safetensors(str(directory / "adapters.safetensors"), weights)
    params = {"rank": RANK, "scale": 2.0, "dropout": 0.0, "keys": ["self_attn.q_proj"]}
    config = {"fine_tune_type": "lora", "num_layers": LAYERS, "lora_parameters": params}
    (directory / "adapter_config.json").write_text(json.dumps(config))


def config(streams: int, adapters: list[Path]) -> str:
    lines = [f"      - {{id: tuned-{i}, path: {p}}}" for i, p in enumerate(adapters)]
    block = "    adapters:\n" + "\n".join(lines) if adapters else ""
    return f"""
models:
  - id: smollm2
    source: {SMOLLM2}
    concurrency: {streams}
    sampling: {{temperature: 0}}
    prefix_reuse: false
    disk_cache: false
{block}
"""


async def burst(url: str, models: list[str], max_tokens: int, round_no: int) -> float:
    """All `models`' streams at once; aggregate new tokens per second."""
    bodies = [
        chat_body(
            model,
            [
                {
                    "role": "user",
                    "content": f"Tell a story about {TOPICS[i % len(TOPICS)]} ({round_no}).",
                }
            ],
            max_tokens,
        )
        for i, model in enumerate(models)
    ]
    async with httpx.AsyncClient(timeout=600) as client:
        start = time.perf_counter()
        timings = await asyncio.gather(*(astream_chat(client, url, b) for b in bodies))
    end = max(t.ended for t in timings)
    return sum(t.new_tokens or 0 for t in timings) / (end - start)


def attached(gateway: Gateway) -> dict:
    return gateway.events("model_attached")[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--streams", type=int, default=4, help="streams per adapter")
    args = parser.parse_args()
    load_before = os.getloadavg()
    total = args.adapters * args.streams
    with tempfile.TemporaryDirectory(prefix="bench-lora-") as folder:
        paths = [Path(folder) / f"tuned-{i}" for i in range(args.adapters)]
        for i, path in enumerate(paths):
            write_adapter(path, i + 1)
        with (
            Gateway(config(total, []), "plain") as plain,
            Gateway(config(total, paths), "adapted") as adapted,
        ):
            rates: dict[str, list[float]] = {"base small": [], "base": [], "mixed": []}
            mixed = [f"tuned-{i % args.adapters}" for i in range(total)]
            for round_no in range(args.repeats + 1):  # the first round warms up
                got = {
                    "base small": asyncio.run(
                        burst(plain.url, ["smollm2"] * args.streams, args.max_tokens, round_no)
                    ),
                    "base": asyncio.run(
                        burst(plain.url, ["smollm2"] * total, args.max_tokens, round_no)
                    ),
                    "mixed": asyncio.run(burst(adapted.url, mixed, args.max_tokens, round_no)),
                }
                print(f"round {round_no}: " + ", ".join(f"{k} {v:.1f}" for k, v in got.items()))
                if round_no:
                    for key, value in got.items():
                        rates[key].append(value)
            plain_memory = attached(plain)["memory_bytes"]
            adapted_event = attached(adapted)
            platform_path = plain.platform()
    small, base, mix = (median(rates[k]) for k in ("base small", "base", "mixed"))
    throughput = table(
        ["batch", "streams", "tokens/s (median)", "mixed / this"],
        [
            [f"base alone x{args.streams}", args.streams, fmt(small, 1), fmt(mix / small, 3)],
            [f"base alone x{total}", total, fmt(base, 1), fmt(mix / base, 3)],
            [f"{args.adapters} adapters x {args.streams} mixed", total, fmt(mix, 1), "1"],
        ],
    )
    # "N (x GiB) beside M (y GiB) of base weights": the adapters' and the base's bytes.
    said = re.match(r"(\d+) .* beside (\d+) ", adapted_event["detail"]["adapter_bytes"])
    adapter_bytes, weight_bytes = int(said[1]), int(said[2])
    kv = plain_memory - weight_bytes  # the KV cache budget of `total` streams, either way
    memory = table(
        ["what is held", "weights + adapters, bytes", "MiB", "memory_bytes (with KV), MiB"],
        [
            [
                "the base alone",
                weight_bytes,
                fmt(weight_bytes / 2**20, 1),
                fmt(plain_memory / 2**20, 1),
            ],
            [
                f"the base + {args.adapters} adapters (one load)",
                weight_bytes + adapter_bytes,
                fmt((weight_bytes + adapter_bytes) / 2**20, 1),
                fmt(adapted_event["memory_bytes"] / 2**20, 1),
            ],
            [
                f"{args.adapters} fused copies",
                args.adapters * weight_bytes,
                fmt(args.adapters * weight_bytes / 2**20, 1),
                fmt((args.adapters * weight_bytes + kv) / 2**20, 1),
            ],
        ],
    )
    ratio = (weight_bytes + adapter_bytes) / (args.adapters * weight_bytes)
    share = f"weights held, one base with its adapters / {args.adapters} fused copies: {ratio:.3f}"
    body = f"{throughput}\n\n{memory}\n\n{share}"
    notes = (
        f"{args.repeats} rounds after a warm-up, {args.max_tokens} new tokens a stream at most; "
        f"adapters: {adapted_event['detail'].get('adapter_bytes')}."
    )
    report(
        f"Adapters: {args.adapters} adapters x {args.streams} streams mixed vs the base alone",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    sys.exit(main())
