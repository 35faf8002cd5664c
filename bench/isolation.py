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
import os

from common import Gateway, report
from concurrency import alternate, alternate_config, alternate_options, alternate_table


def main() -> None:
    parser = argparse.ArgumentParser()
    alternate_options(parser, clients="1,32,128", max_tokens=128)
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    models = ("threaded", "isolated")
    config = alternate_config(
        args, {"threaded": "isolation: none", "isolated": "isolation: process"}
    )
    load_before = os.getloadavg()
    with Gateway(config, "isolation") as gateway:
        result = alternate(gateway.url, models, counts, args.rounds, args.max_tokens)
        platform_path = gateway.platform()
        decoding = gateway.decoding()
    body = alternate_table(models, counts, result)
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
