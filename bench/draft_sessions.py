"""A `draft:` model's next turn: its draft cache parked with the session against prefilled
again, the gateway of this commit against that of `--at REV` (before the draft cache was
parked), in the same run.

    .venv/bin/python bench/draft_sessions.py [--at REV] [--tokens 1500] [--rounds 3]

Both gateways serve SmolLM2 with `draft: {model: d}` (SmolLM2 drafting for itself: the only
model on this machine; its drafts are all kept, so the draft model costs what the model
does), prefix reuse on. Each round is a fresh agent conversation (bench/disk_cache.py's
system prompt of ~`--tokens` tokens): turn 1, then turn 2, whose prompt starts with turn 1's.
Turn 2's time to first token and whole request are what differ: the model's cache of
turn 1 is reused on both sides, the draft model's only where it was parked, and the draft
model prefills before the first draft. Sides alternate first by round; round 0 warms up.
Ratio: this commit / REV, per round, median.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
from pathlib import Path

import httpx
from common import SMOLLM2, Gateway, fmt, report, table
from concurrency import tree_at
from disk_cache import ask, turn

CONFIG = f"""
server: {{host: 127.0.0.1}}
models:
  - id: agent
    source: {SMOLLM2}
    context: {{max: 4096}}
    draft: {{model: d, tokens: 3}}
  - id: d
    source: {SMOLLM2}
    context: {{max: 4096}}
"""


def conversation(client, gateway, session: int, tokens: int, max_tokens: int) -> dict:
    asked = turn(session, tokens, [], 0)
    first = ask(client, gateway, "agent", asked, max_tokens)
    history = [asked[-1], {"role": "assistant", "content": first["text"]}]
    second = ask(client, gateway, "agent", turn(session, tokens, history, 1), max_tokens)
    return {"first": first, "second": second}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--at", default="37856bc", help="the commit to compare against")
    parser.add_argument("--tokens", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=24)
    args = parser.parse_args()
    load_before = os.getloadavg()
    sides = ("this commit", f"at {args.at}")
    results: dict[str, list[dict]] = {side: [] for side in sides}
    with contextlib.ExitStack() as stack:
        older = tree_at(args.at, Path(stack.enter_context(tempfile.TemporaryDirectory())))
        gateways = {
            sides[0]: Gateway(CONFIG, "draft-now"),
            sides[1]: Gateway(CONFIG, "draft-at", code=older),
        }
        for gateway in gateways.values():
            stack.callback(gateway.stop)
            gateway.wait_ready()
        platform = gateways[sides[0]].platform()
        client = stack.enter_context(httpx.Client(timeout=900))
        for round_ in range(args.rounds + 1):
            order = sides if round_ % 2 else sides[::-1]
            for side in order:
                session = round_ * 2 + sides.index(side)  # nothing shared across sides
                got = conversation(client, gateways[side], session, args.tokens, args.max_tokens)
                print(
                    f"round {round_} {side}: turn 2 ttft {got['second']['ttft']:.2f} s, "
                    f"total {got['second']['total']:.2f} s",
                    flush=True,
                )
                if round_:
                    results[side].append(got)
    rows = []
    for side in sides:
        seconds = results[side]
        rows.append(
            [
                side,
                fmt(statistics.median(r["first"]["total"] for r in seconds)),
                fmt(statistics.median(r["second"]["ttft"] for r in seconds)),
                fmt(statistics.median(r["second"]["total"] for r in seconds)),
                fmt(statistics.median(r["second"]["ram"] for r in seconds), 0),
                fmt(statistics.median(r["second"]["prompt"] for r in seconds), 0),
            ]
        )
    pairs = list(zip(results[sides[0]], results[sides[1]], strict=True))
    ratios = [now["second"]["total"] / then["second"]["total"] for now, then in pairs]
    ttft_ratios = [now["second"]["ttft"] / then["second"]["ttft"] for now, then in pairs]
    body = table(
        [
            "gateway",
            "turn 1 s",
            "turn 2 TTFT s",
            "turn 2 total s",
            "turn 2 reused tokens",
            "turn 2 prompt tokens",
        ],
        rows,
    )
    body += (
        f"\n\nTurn 2, this commit / {args.at} (median of per-round ratios): whole request "
        f"**{fmt(statistics.median(ratios))}** ({' '.join(fmt(r) for r in ratios)}), TTFT "
        f"{fmt(statistics.median(ttft_ratios))} ({' '.join(fmt(r) for r in ttft_ratios)})."
    )
    notes = (
        f"{args.rounds} rounds after a warm-up, sides alternating first; greedy, max_tokens "
        f"{args.max_tokens}; SmolLM2 drafting for itself (tokens 3); a fresh conversation per "
        "round and side."
    )
    report(
        "Draft model: the next turn with the draft cache parked vs prefilled again",
        body,
        platform_path=platform,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
