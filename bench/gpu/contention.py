"""Raw `BatchGenerator` alone against beside busy processes, in one process: does other work
on the host's cores slow an MLX step?

    python3 bench/gpu/contention.py MODEL_DIR [--clients 128] [--busy 4] [--rounds 5]

At 128 streams a step on the H200 is bound by the host's CPU (the model thread is on the CPU
98-99 % of it: graph building and kernel launches), and through the gateway the benchmark's
own client processes (4, each parsing 32 SSE streams in Python) run on the same host while
raw `BatchGenerator` runs with nothing beside it. Sides, interleaved per round (round 0
warms up and is dropped):

- `alone`: the prompts through a fresh `BatchGenerator`, nothing else running;
- `beside N busy`: the same while N processes spin in Python (json work, as SSE clients do);
- `pinned beside N busy`: this process on the first half of the cores, the N spinners on the
  other half (whether sharing a core, rather than the host, is what costs).

Reported per side: aggregate tok/s, the decode step (wall after the first token / the new
tokens of one stream), medians and per-round ratios to `alone`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # bench/: the product's prompts
sys.path.insert(0, str(HERE.parents[1]))  # the product


def spin(stop, cpus: list[int] | None) -> None:
    """Python without pause until `stop` is set: what a client process parsing frames runs."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    frame = json.dumps({"choices": [{"delta": {"content": "token"}, "index": 0}]})
    while not stop.is_set():
        for _ in range(1000):
            json.loads(frame)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--clients", type=int, default=128)
    parser.add_argument("--busy", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()

    from concurrency import prompt
    from raw_batch import decode_batch, encoder, load_held

    model, tokenizer, held = load_held(args.model_dir)
    eos = sorted(tokenizer.eos_token_ids)
    encode = encoder(tokenizer)
    everything = sorted(os.sched_getaffinity(0))
    half = len(everything) // 2
    mine, theirs = everything[:half], everything[half:]
    print(f"weights {held}, cores {len(everything)}", flush=True)
    context = multiprocessing.get_context("spawn")

    def measure(round_: int, busy: int, pinned: bool) -> dict:
        prompts = [encode(prompt(round_, i)) for i in range(args.clients)]
        stop = context.Event()
        spinners = [
            context.Process(target=spin, args=(stop, theirs if pinned else None))
            for _ in range(busy)
        ]
        for p in spinners:
            p.start()
        os.sched_setaffinity(0, mine if pinned else everything)
        time.sleep(0.5 if busy else 0)  # the spinners started and spinning
        try:
            result = decode_batch(model, eos, prompts, args.max_tokens, args.clients)
        finally:
            stop.set()
            for p in spinners:
                p.join()
            os.sched_setaffinity(0, everything)
        result["step_ms"] = 1000 * (result["wall"] - result["ttft"]) / (args.max_tokens - 1)
        return result

    sides = {
        "alone": (0, False),
        f"beside {args.busy} busy": (args.busy, False),
        f"pinned beside {args.busy} busy": (args.busy, True),
    }
    found: dict = {name: [] for name in sides}
    for round_ in range(args.rounds + 1):
        names = list(sides)
        names = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in names:
            result = measure(round_, *sides[name])
            if round_:
                found[name].append(result)
            print(
                f"round {round_} {name:24s} {result['aggregate']:9.1f} tok/s "
                f"step {result['step_ms']:6.2f} ms ttft {1000 * result['ttft']:6.1f} ms",
                flush=True,
            )
    summary = {}
    for name, results in found.items():
        alone = found["alone"]
        ratios = [r["aggregate"] / a["aggregate"] for r, a in zip(results, alone, strict=True)]
        summary[name] = {
            "aggregate": statistics.median(r["aggregate"] for r in results),
            "step_ms": statistics.median(r["step_ms"] for r in results),
            "ttft_ms": statistics.median(1000 * r["ttft"] for r in results),
            "x_alone": statistics.median(ratios),
            "x_alone_range": [min(ratios), max(ratios)],
        }
        s = summary[name]
        print(
            f"{name:24s} median {s['aggregate']:9.1f} tok/s step {s['step_ms']:.2f} ms "
            f"ttft {s['ttft_ms']:.1f} ms x alone {s['x_alone']:.3f} "
            f"({s['x_alone_range'][0]:.3f}-{s['x_alone_range'][1]:.3f})"
        )
    print(json.dumps({"model": args.model_dir, "summary": summary}))


if __name__ == "__main__":
    main()
