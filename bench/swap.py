"""Swap-aware admission: two models that do not fit the memory budget together, 20
alternating requests from 4 clients; model loads and total time with a burst allowed
(`server.max_swap_wait: 5s`) and without one (`0s`: the loaded model stops admitting as
soon as the other waits, after one request per load).

    .venv/bin/python bench/swap.py [--rounds 3] [--load-delay 0.5] [--token-delay 0.02]

Scripted models (`script.load_delay` stands for loading weights, `script.memory` for their
size), so the figures measure the gateway's scheduling, not a model. Each client sends its
5 requests one after another, alternating models (client 0 starts on `a`, client 1 on
`b`, ...). Rounds alternate between the two gateways; medians over rounds.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import httpx
from common import Gateway, fmt, median, report, table

CLIENTS, PER_CLIENT = 4, 5
MODELS = ("a", "b")


def config(swap_wait: str, load_delay: float, token_delay: float) -> str:
    script = (
        f'{{reply: "one two three four", token_delay: {token_delay}, '
        f"memory: 600MiB, load_delay: {load_delay}}}"
    )
    models = "".join(
        f"""
  - id: {name}
    engine: scripted
    residency: {{on_demand: true, idle_ttl: 10m}}
    script: {script}"""
        for name in MODELS
    )
    return f"server: {{memory_budget: 1GiB, max_swap_wait: {swap_wait}}}\nmodels:{models}\n"


def one_round(gateway: Gateway) -> tuple[int, float, int]:
    """(loads, seconds, failed requests) for the 20 requests."""
    loads_before = len(gateway.events("model_attached"))
    failed = []

    def client(index: int) -> None:
        with httpx.Client(timeout=300) as http:
            for i in range(PER_CLIENT):
                body = {
                    "model": MODELS[(index + i) % 2],
                    "messages": [{"role": "user", "content": f"client {index} turn {i}"}],
                    "max_tokens": 16,
                }
                answer = http.post(f"{gateway.url}/v1/chat/completions", json=body)
                if answer.status_code != 200:
                    failed.append(answer.status_code)

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    time.sleep(0.3)  # the log thread writes the last lines
    return len(gateway.events("model_attached")) - loads_before, elapsed, len(failed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--load-delay", type=float, default=0.5)
    parser.add_argument("--token-delay", type=float, default=0.02)
    args = parser.parse_args()
    load_before = os.getloadavg()
    sides = {"with (max_swap_wait 5s)": "5s", "without (max_swap_wait 0s)": "0s"}
    gateways = {
        label: Gateway(config(wait, args.load_delay, args.token_delay), name="swap")
        for label, wait in sides.items()
    }
    results: dict[str, list[tuple[int, float, int]]] = {label: [] for label in sides}
    try:
        for gateway in gateways.values():
            gateway.wait_up(60)  # its models are on demand: none is loaded yet
        for _ in range(args.rounds):
            for label, gateway in gateways.items():
                results[label].append(one_round(gateway))
        platform_path = next(iter(gateways.values())).platform()
    finally:
        for gateway in gateways.values():
            gateway.stop()
    rows = []
    for label, runs in results.items():
        rows.append(
            [
                label,
                fmt(median([r[0] for r in runs]), 0),
                fmt(median([r[1] for r in runs])),
                sum(r[2] for r in runs),
                ", ".join(f"{r[0]} / {r[1]:.2f}s" for r in runs),
            ]
        )
    with_, without = results.values()
    ratio_loads = median([r[0] for r in with_]) / median([r[0] for r in without])
    ratio_time = median([r[1] for r in with_]) / median([r[1] for r in without])
    body = table(
        ["side", "loads (median)", "total s (median)", "failed requests", "each round"], rows
    )
    body += (
        f"\n\nwith / without: loads {ratio_loads:.2f} x, total time {ratio_time:.2f} x "
        f"({args.rounds} rounds, load {args.load_delay}s, token delay {args.token_delay}s)"
    )
    report(
        "Swap-aware admission: two models that do not fit together, scripted",
        body,
        platform_path=platform_path,
        load_before=load_before,
        notes=(
            f"{CLIENTS} clients x {PER_CLIENT} requests, each client alternating a/b; both "
            "models 600MiB against a 1GiB budget, on demand. Loads = `model_attached` events "
            "during the round (the first round also loads from nothing)."
        ),
    )


if __name__ == "__main__":
    main()
