"""What prompt-lookup speculation costs when nothing is accepted: the gateway's `MLXBatch`
with `speculation: {kind: prompt_lookup}` against the same batch without, in one process.

    python3 bench/gpu/speculation_ab.py MODEL_DIR [--clients 1,8,64] [--rounds 3] [--max-tokens 128]

On random weights the answers are noise: the look-up still finds n-grams (the prompts are
bench/speculation.py's code-edit and summary prompts, which repeat themselves), the model
refuses nearly every draft, and the ratio is the price of drafting that does not pay (issue
28's "no loss when drafts miss" target: >= 0.97). Greedy; round 0 warms up and is dropped;
sides alternate first by round. Prints medians, the drafted and accepted counts, and one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # bench/: the product's prompts
sys.path.insert(0, str(HERE.parents[1]))  # the product


def run(engine, round_: int, clients: int, max_tokens: int) -> tuple[float, int, int]:
    """Aggregate tok/s of `clients` requests added at once; drafted and accepted tokens."""
    import msgspec
    from speculation import messages

    from schemas.canonical import ChatRequest, Finished

    batch = engine.open_batch()
    tasks = ["code edit", "summary"]
    for i in range(clients):
        body = {
            "messages": messages(tasks[i % 2], round_, i),
            "max_tokens": max_tokens,
            "sampling": {"temperature": 0},
        }
        batch.add(i, msgspec.convert(body, ChatRequest), lambda: False)
    started = time.perf_counter()
    done, tokens, drafted, accepted = 0, 0, 0, 0
    while done < clients:
        for _, output in batch.step():
            if isinstance(output, Finished):
                done += 1
                tokens += output.new_tokens
                drafted += output.drafted_tokens
                accepted += output.accepted_tokens
    return tokens / (time.perf_counter() - started), drafted, accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    most = max(counts)
    from batch_ab import load_engine

    import engines.llm.loading

    # The product refuses speculation on CUDA (what this measures): lifted in this process only.
    engines.llm.loading.refuse_speculation_on_cuda = lambda *_: None

    sides = {
        "plain": load_engine(args.model_dir, most)[0],
        "lookup": load_engine(args.model_dir, most, speculation={"kind": "prompt_lookup"})[0],
    }
    rates: dict[tuple[str, int], list[float]] = {}
    drafts: dict[int, list[int]] = {c: [0, 0] for c in counts}
    for round_ in range(args.rounds + 1):
        for clients in counts:
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for side in order:
                rate, drafted, accepted = run(sides[side], round_, clients, args.max_tokens)
                if round_ == 0:
                    continue
                rates.setdefault((side, clients), []).append(rate)
                if side == "lookup":
                    drafts[clients][0] += drafted
                    drafts[clients][1] += accepted
                print(f"round {round_} {side:6s} x{clients}: {rate:8.1f} tok/s", flush=True)
    summary = {}
    for clients in counts:
        plain = statistics.median(rates[("plain", clients)])
        lookup = statistics.median(rates[("lookup", clients)])
        ratios = [
            b / a
            for a, b in zip(rates[("plain", clients)], rates[("lookup", clients)], strict=True)
        ]
        drafted, accepted = drafts[clients]
        summary[clients] = {
            "plain": round(plain, 1),
            "lookup": round(lookup, 1),
            "ratio": round(statistics.median(ratios), 3),
            "drafted": drafted,
            "accepted": accepted,
        }
        print(
            f"x{clients}: plain {plain:.1f} lookup {lookup:.1f} tok/s, ratio "
            f"{summary[clients]['ratio']}, drafted {drafted}, accepted {accepted}"
        )
    print(json.dumps({"speculation_ab": summary}))


if __name__ == "__main__":
    main()
