"""A lone stream on five configurations of one model, through one gateway.

`solo_configs.py` with everything the gateway adds around a model's thread: the runner, the
event loop, HTTP, the disk tier. The same five models (`concurrency` 1 / 128, prefix reuse
on / off, context 1024 / 4096) of one weights directory, one greedy 128-token streamed chat
at a time, the sides rotating each round; per side the model thread's own decode speed
(`generated`: (new tokens - 1) / `decode_s`), median over rounds after a warm-up round, and
the median per-round ratio to the side declared first.

    python3 bench/gpu/lone_configs.py MODEL_DIR [--rounds 10] [--memory-budget auto]
        [--first serial]   # the side declared (so loaded and started) first
        [--same serial]    # five models with this side's settings: only their place differs
        [--name-in-prompt] # each side's prompt names it (runs 37-39): each decodes its own text
        [--start serial]   # the side asked first (the gateway's first request, in the warm-up)

Every side gets the same prompt in a round (the round's number in it), so every side decodes
the same tokens: with the side's name in the prompt (`--name-in-prompt`, as runs 37-39 did),
a random-weight model's greedy text follows the prompt's last words, so each side decoded a
text of its own, round after round. Each side's median characters streamed are printed.

The sides are asked in the same cyclic order whatever `--first` says, so a lead that moves
with `--first` follows the declaration, and one that stays follows the order of asking.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import Gateway, chat_body, stream_chat  # noqa: E402

# Each side: concurrency, prefix reuse, context.
SIDES = {
    "serial": (1, False, 4096),
    "batched": (128, True, 1024),
    "batched-noreuse": (128, False, 1024),
    "c128-ctx4096-noreuse": (128, False, 4096),
    "c1-reuse": (1, True, 4096),
}


def config(model_dir: str, budget: str, first: str, same: str | None) -> str:
    """The gateway's models.yaml: the five sides, `first` declared (and loaded) first; with
    `same`, every side has that side's settings."""
    text = f"server: {{host: 127.0.0.1, memory_budget: {budget}}}\nmodels:\n"
    order = [first] + [name for name in SIDES if name != first]
    for name in order:
        concurrency, reuse, context = SIDES[same or name]
        text += (
            f"  - id: {name}\n    engine: mlx\n    source: {model_dir}\n"
            f"    context: {{max: {context}}}\n    concurrency: {concurrency}\n"
            f"    prefix_reuse: {str(reuse).lower()}\n"
        )
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds, after a warm-up")
    parser.add_argument("--memory-budget", default="auto")
    parser.add_argument(
        "--first", default="serial", choices=list(SIDES), help="the model declared first"
    )
    parser.add_argument("--same", choices=list(SIDES), help="every model with this side's settings")
    parser.add_argument(
        "--start", default="serial", choices=list(SIDES), help="the side asked first"
    )
    parser.add_argument("--name-in-prompt", action="store_true", help="each side's prompt names it")
    args = parser.parse_args()
    names = list(SIDES)
    chars: dict[str, list[int]] = {name: [] for name in names}
    yaml = config(args.model_dir, args.memory_budget, args.first, args.same)
    with Gateway(yaml, "lone-configs") as gateway:
        gateway.wait_ready()
        with httpx.Client(timeout=600) as client:
            for round_ in range(args.rounds + 1):
                shift = (round_ + names.index(args.start)) % len(names)
                for name in names[shift:] + names[:shift]:
                    prompt = f"Tell me story {round_}" + (
                        f" about {name}." if args.name_in_prompt else "."
                    )
                    body = chat_body(name, [{"role": "user", "content": prompt}], 128)
                    chars[name].append(len(stream_chat(client, gateway.url, body).text))
        events = gateway.events("generated")
        deadline = time.monotonic() + 10  # the log is written off the loop: the last may lag
        while len(events) < len(names) * (args.rounds + 1) and time.monotonic() < deadline:
            time.sleep(0.2)
            events = gateway.events("generated")
    rates: dict[str, list[float]] = {name: [] for name in names}
    for event in events:
        rates[event["model"]].append((event["new_tokens"] - 1) / event["decode_s"])
    rates = {name: r[1:] for name, r in rates.items()}  # round 0 warms up
    print(json.dumps({"declared_first": args.first, "settings_of": args.same or "each side"}))
    for name, rate in rates.items():
        ratios = [a / b for a, b in zip(rate, rates[args.first], strict=False)]
        record = {
            "side": name,
            "decode_tok_s": round(statistics.median(rate), 1),
            "vs_first": round(statistics.median(ratios), 3),
            "spread": [round(min(ratios), 3), round(max(ratios), 3)],
            "per_round": [round(r) for r in rate],
            "median_chars": statistics.median(chars[name][1:]),
        }
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
