"""What the ops page's Activity history costs per request: CPU on the thread that logs (the
tap only queues the line) and on the store's writer thread (parse, fold, SQLite).

    .venv/bin/python bench/activity_store.py [--requests 5000] [--rounds 3]

Each request is the five event lines a plain chat request logs (started, routed, queued,
generated, finished), rendered as the log renders them, made before the clock starts. The
store is fed `--requests` requests as fast as the tap takes them, then flushed; the
medians of `--rounds` rounds, for the in-memory store and for the SQLite file (WAL).
The gateway's own per-request time on the scripted engine is in bench/overhead.py. Lines
fed this fast reach the writer in large batches; a gateway's trickle commits more often
(the commit's disk wait releases the GIL). Run from the repository root with the package
installed from this tree (`PYTHONPATH=.` from a worktree).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from common import fmt, median, report, table

from gateway.ops.activity.store import ActivityStore
from schemas.config import ActivityConfig


def lines_of(request_id: str) -> list[str]:
    ts = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    events = [
        {"event": "request_started", "method": "POST", "path": "/v1/chat/completions"},
        {"event": "request_routed", "requested": "default", "served": "m", "alias": "default",
         "fallback": False, "stream": False, "protocol": "openai"},
        {"event": "request_queued", "model": "m", "position": 1},
        {"event": "generated", "model": "m", "prompt_tokens": 120, "new_tokens": 40,
         "prefill_s": 0.05, "decode_s": 1.2, "queue_wait_s": 0.001, "ttft_s": 0.06,
         "stop_reason": "stop", "reused_prefix_tokens": 64, "session_evicted": False},
        {"event": "request_finished", "status": 200, "duration_ms": 1300.5, "error": None},
    ]  # fmt: skip
    head = {"ts": ts, "level": "info", "request_id": request_id}
    return [
        json.dumps({"event": e.pop("event"), **head, **e}, separators=(",", ":")) for e in events
    ]


def one_round(path: Path | None, requests: int) -> tuple[float, float, float]:
    """(tap µs, whole CPU µs, wall µs) per request."""
    lines = [line for i in range(requests) for line in lines_of(f"req_{i:08x}")]
    store = ActivityStore(path, ActivityConfig, lambda: "key-1")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for line in lines:
        store.tap(line)
    tapped = time.process_time()
    store.flush(120)
    cpu1, wall1 = time.process_time(), time.perf_counter()
    store.close()
    per = 1e6 / requests
    return (tapped - cpu0) * per, (cpu1 - cpu0) * per, (wall1 - wall0) * per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, path in (("memory", None), ("SQLite file (WAL)", Path(folder) / "a.sqlite3")):
            runs = [one_round(path, args.requests) for _ in range(args.rounds)]
            rows.append([name, *(fmt(median([r[i] for r in runs]), 1) for i in range(3))])
    body = table(
        ["store", "tap µs/request (emitting thread)", "CPU µs/request (all)", "wall µs/request"],
        rows,
    )
    report(
        "Activity store: cost per request",
        body,
        platform_path=None,
        load_before=load_before,
        notes=(
            f"{args.rounds} rounds of {args.requests} requests (5 lines each), medians; CPU "
            "is the process's (the tap and the writer thread); the tap checks each line's "
            "first bytes and queues it, the writer parses, folds and writes in batches."
        ),
    )


if __name__ == "__main__":
    main()
