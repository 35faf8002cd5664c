"""How each burst of a `bench_gateway.py` run started: its arrivals and its first tokens, in
groups, from the gateway's own events.

    python3 bench/gpu/burst_groups.py EVENTS_LOG [--model batched] [--gap-ms 4]

A burst is a run of requests to the model started within 0.5 s of each other. Per burst:
its size, the spread of its arrivals (`request_started`), the times of its first tokens
(arrival + `ttft_s` of each `generated`) in groups (a group ends at a pause over
`--gap-ms`), each group as (ms after the burst's first arrival, requests), and the median of
the model thread's decode per stream ((new tokens - 1) / `decode_s`). A burst that started
whole has one group, or a few within milliseconds (one prefill handing out in order); a
late group is part of the burst prefilled after the rest began decoding.
"""

from __future__ import annotations

import argparse
import json
import statistics
from datetime import datetime


def seconds(event: dict) -> float:
    return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()


def bursts(events: list[dict], model: str) -> list[list[tuple[float, dict]]]:
    """Each burst's (arrival, `generated` event) pairs, in arrival order."""
    started = {e["request_id"]: seconds(e) for e in events if e.get("event") == "request_started"}
    done = [e for e in events if e.get("event") == "generated" and e.get("model") == model]
    arrivals = sorted((started[e["request_id"]], e) for e in done if e["request_id"] in started)
    groups: list[list[tuple[float, dict]]] = []
    for arrival, event in arrivals:
        if not groups or arrival - groups[-1][-1][0] > 0.5:
            groups.append([])
        groups[-1].append((arrival, event))
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("events")
    parser.add_argument("--model", default="batched")
    parser.add_argument("--gap-ms", type=float, default=4.0)
    args = parser.parse_args()
    with open(args.events) as lines:
        events = [json.loads(line) for line in lines if line.startswith("{")]
    for burst in bursts(events, args.model):
        first = burst[0][0]
        tokens = sorted(a - first + e["ttft_s"] for a, e in burst if e["ttft_s"] is not None)
        groups: list[list[float]] = []
        for t in tokens:
            if not groups or t - groups[-1][-1] > args.gap_ms / 1000:
                groups.append([])
            groups[-1].append(t)
        decode = [(e["new_tokens"] - 1) / e["decode_s"] for _, e in burst if e["decode_s"] > 0]
        print(
            f"{len(burst)} requests, arrivals over {1000 * (burst[-1][0] - first):.0f} ms; "
            f"first tokens (ms, requests): {[(round(1000 * g[0]), len(g)) for g in groups]}; "
            f"decode per stream {statistics.median(decode):.1f} tok/s (median)"
        )


if __name__ == "__main__":
    main()
