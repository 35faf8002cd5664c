"""What one log event costs the thread that emits it: the request path's events, redacted and
rendered as the gateway does, most of them on the event loop.

    .venv/bin/python bench/log_events.py [--rounds 7] [--events 20000] [--at REV]

Each round runs, in a fresh process per tree, the events one streamed chat completion logs
(`request_started`, `request_routed`, `request_queued`, `generated`, `request_finished`)
`--events` times each through `engines.log.emit`, with the log set up as `gateway serve`
sets it (JSON lines; written to /dev/null by the log's own writer thread) and two API keys
known to the redactor, and times them. With `--at`, commit REV's tree takes its turn in the
same rounds (the first of each round alternating): the ratio between the two, per round.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from common import per_tree_costs, report, run_worker

# Run in the tree under test (its own gateway/, engines/, schemas/ first on sys.path).
WORKER = r"""
import json, os, sys, time
sys.stdout = open(os.devnull, "w")
from gateway.logs.setup import LogScope, setup_logging
from engines.log import emit
import structlog
from schemas import events as ev

setup_logging("info")
scope = LogScope()
scope.redactor.secrets = lambda: ("sk-gateway-key-0123456789", "sk-admin-key-9876543210")
scope.enter()
structlog.contextvars.bind_contextvars(request_id="req_0123456789abcdef")
path = [
    ev.RequestStarted(method="POST", path="/v1/chat/completions"),
    ev.RequestRouted(requested="smollm2", served="smollm2", alias=None, fallback=False,
                     stream=True, protocol="openai"),
    ev.RequestQueued(model="smollm2", position=0),
    ev.Generated(model="smollm2", prompt_tokens=60, new_tokens=128, prefill_s=0.012,
                 decode_s=0.41, queue_wait_s=0.0002, ttft_s=0.013, stop_reason="length"),
    ev.RequestFinished(status=200, duration_ms=431.5),
]
n = int(sys.argv[1])
for event in path:  # warm-up
    emit(event)
start = time.perf_counter()
for _ in range(n):
    for event in path:
        emit(event)
print(json.dumps({"us_per_event": (time.perf_counter() - start) / (n * len(path)) * 1e6}),
      file=sys.stderr)
"""


def one_round(tree: Path, events: int) -> float:
    return run_worker(WORKER, str(events), tree=tree)["us_per_event"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--events", type=int, default=20000, help="emits of each event a round")
    parser.add_argument("--at", help="also commit REV's tree, rounds interleaved")
    args = parser.parse_args()
    load_before = os.getloadavg()
    body = per_tree_costs(
        args.at, args.rounds, lambda tree: one_round(tree, args.events), "an event", 1
    )
    notes = (
        f"{args.rounds} rounds, each tree in a fresh process per round; per round the five "
        f"events of one streamed chat completion emitted {args.events} times each, the log "
        "set up as `gateway serve` sets it (to /dev/null), two API keys known to the redactor."
    )
    report("Log events: the cost of one", body, platform_path=None, load_before=load_before,
           notes=notes)  # fmt: skip


if __name__ == "__main__":
    main()
