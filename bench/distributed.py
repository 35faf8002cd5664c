"""`distributed:` (the model sharded over ranks) against the same model in one process.

    .venv/bin/python bench/distributed.py [--source SOURCE] [--ranks 2] [--mode pipeline]
        [--backend ring] [--clients 1,4] [--rounds 3] [--max-tokens 64] [--context 1024]

Two models on the same source in one `gateway serve`: `whole` (`isolation: process`: the
model in one process of its own) and `sharded` (`distributed: {ranks, mode, backend}`, every
rank on this machine), each with `concurrency` = the largest client count. Per round and
client count, the same burst of streaming clients goes to each (order alternating by
round); reported: aggregate tok/s medians (the gateway's own token counts), the ratio
sharded / whole (the cost of the collectives and of the step-by-step sharing), TTFT, the
memory each rank holds against the whole model's (from `model_attached`), and whether the
greedy texts were the same. Round 0 warms up and is dropped.

On one machine the ranks share its cores and memory bandwidth: this measures the overhead
of sharding, not the gain of more machines. On the H200 kit (bench/gpu/) with two GPUs:
`--backend nccl`.
"""

from __future__ import annotations

import argparse
import os

from common import Gateway, report
from concurrency import alternate, alternate_config, alternate_options, alternate_table


def main() -> None:
    parser = argparse.ArgumentParser()
    alternate_options(parser, clients="1,4", max_tokens=64)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--mode", default="pipeline", choices=("pipeline", "tensor"))
    parser.add_argument("--backend", default="ring", choices=("ring", "nccl"))
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    models = ("whole", "sharded")
    sharded = f"distributed: {{ranks: {args.ranks}, mode: {args.mode}, backend: {args.backend}}}"
    config = alternate_config(args, {"whole": "isolation: process", "sharded": sharded})
    load_before = os.getloadavg()
    with Gateway(config, "distributed") as gateway:
        attached = {e["model"]: e for e in gateway.events("model_attached")}
        result = alternate(gateway.url, models, counts, args.rounds, args.max_tokens)
        platform_path = gateway.platform()
    body = alternate_table(models, counts, result)
    mib = 2**20
    per_rank = [int(m) for m in attached["sharded"]["detail"]["memory_per_rank"].split(",")]
    memory = (
        f"memory (weights + KV at the window, as `model_attached` reports): whole "
        f"{attached['whole']['memory_bytes'] / mib:.0f} MiB; sharded per rank "
        + ", ".join(f"{m / mib:.0f}" for m in per_rank)
        + " MiB"
    )
    report(
        f"Distributed: {args.ranks} ranks ({args.mode}, {args.backend}) vs one process",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=f"{memory}. Source {args.source}, {args.max_tokens} new tokens, {args.rounds} "
        "rounds after a warm-up, medians; every rank on this machine.",
    )


if __name__ == "__main__":
    main()
