"""Prefix reuse on against off inside the gateway's batch (`MLXBatch`), one process, no HTTP.

    python3 bench/gpu/reuse_ab.py MODEL_DIR [--clients 128] [--rounds 3] [--max-tokens 128]

Through HTTP on the H200, 128 clients with distinct prompts reached half the aggregate with
prefix reuse on (runs 13 and 14 in bench/RESULTS.md: 0.483 and 0.474) with the same time to
the first token. This tells whether that cost is the batch's own (parking finished caches,
looking up prompts) or lies outside it: two engines on the same model, one with
`prefix_reuse: true`, every request added at once (or staggered, `--groups`), stepped to the
end, sides alternating; round 0 warms up. Prints medians and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # bench/: the product's prompts
sys.path.insert(0, str(HERE.parents[1]))  # the product

from batch_ab import load_engine, requests, through_batch  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--clients", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument(
        "--groups",
        type=int,
        default=0,
        help="0: every request added at once; N: one first, then the rest in N groups a step "
        "apart, as a burst of HTTP arrivals reaches the batch (batch_ab.py's staggered)",
    )
    args = parser.parse_args()
    engines = {
        "reuse on": load_engine(args.model_dir, args.clients, prefix_reuse=True)[0],
        "reuse off": load_engine(args.model_dir, args.clients, prefix_reuse=False)[0],
    }
    rates: dict[str, list[float]] = {side: [] for side in engines}
    for round_ in range(args.rounds + 1):
        for side, engine in list(engines.items())[:: 1 if round_ % 2 else -1]:
            reqs = requests(round_, args.clients, args.max_tokens)
            rate = through_batch(engine, reqs, args.groups)
            print(f"round {round_} {side}: {rate:.1f} tok/s", flush=True)
            if round_:
                rates[side].append(rate)
    ratios = [a / b for a, b in zip(rates["reuse on"], rates["reuse off"], strict=True)]
    result = {side: statistics.median(v) for side, v in rates.items()}
    result["on / off (median of per-round)"] = statistics.median(ratios)
    print(json.dumps(result | {"rounds": rates}))


if __name__ == "__main__":
    main()
