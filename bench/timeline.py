"""Where a streamed token's time goes, per token, from the model's step to the client.

    .venv/bin/python bench/timeline.py [--source SRC] [--max-tokens 128] [--burst 32]
        [--rounds 3] [--isolation thread|process] [--stream-interval 0ms] [--client-procs 4]

Starts `gateway serve` with `GATEWAY_TIMELINE` set (engines/timeline.py: marks at the model
thread's step, its hand-over to the event loop, the loop taking it, each protocol frame
ready and written), streams one answer from a `concurrency: 1` model and one from a
batched model, then a burst of `--burst` clients on the batched model, each client
recording when each content chunk arrives (the same monotonic clock). Reported, per token
(medians over every token of every round after a warm-up round):

- model thread: the interval between two steps, the step itself (and the CPU time the
  thread spent in it: the rest it waited for the GPU or the GIL), the rest (hand-over,
  admission, pacing);
- hop: from the hand-over (`call_soon_threadsafe`) to the loop running it;
- loop: from taking a step's outputs to the last of its frames written (protocol code,
  SSE encoding, the server's write);
- client: from a frame ready to the client reading it;
- and, for the burst, the loop's busy time per step as a share of the step interval: the
  Python the event loop runs while the model thread would run its own (they share a GIL).

And per burst, from its first request head parsed: the last head parsed, the last request
queued, the model thread's admissions, the first step, the first step that runs the whole
burst, and the last client's first token.

And per single-stream request, where the time to its first token goes: the client's send to
the server having parsed the request (`request`), the handler reading, checking and routing
the body (`submit`), the queue (`inbox`), the hop to the model thread (`admit`), rendering and
tokenizing the prompt (`prepared`), searching the parked caches and the disk tier (`looked up`),
joining the batch (`admitted`), the prefill step (first `stepped`), then the same hand-over,
loop and client parts as a token's; for a part between two marks of one thread, the CPU time
that thread spent in it (a part far longer than its CPU time waited).

With `--isolation process` both models run in a process of their own: its steps are marked
there (the model thread's "in step" is then its wait for them), and the child's step, its
packing of the outputs, and the pipe to the gateway's thread are reported beside the rest.

Nothing is compared here; the ratios against in-process MLX are `single_stream.py`'s and
`bench/gpu/`'s. This names the parts.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import json
import os
import tempfile
import time
from pathlib import Path

import httpx
from common import (
    SMOLLM2,
    ClientProcesses,
    Gateway,
    chat_body,
    fmt,
    is_content_frame,
    median,
    percentile,
    report,
    table,
)

CONFIG = """
server: {{host: 127.0.0.1}}
models:
  - id: serial
    engine: mlx
    source: {source}
    context: {{max: 2048}}
    concurrency: 1{isolation}
  - id: batched
    engine: mlx
    source: {source}
    context: {{max: 2048}}
    concurrency: {concurrency}{isolation}
    stream_interval: {interval}
"""

STORY = "Write a long story about a lighthouse keeper. Round {round}, reader {client}."


async def stream(client: httpx.AsyncClient, url: str, body: dict) -> list[int]:
    """Stream one chat; when it was sent, then the perf_counter_ns of each content chunk's
    arrival."""
    arrivals = [time.perf_counter_ns()]
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            now = time.perf_counter_ns()
            if is_content_frame(line):
                arrivals.append(now)
    return arrivals


async def run(
    url: str,
    model: str,
    clients: int,
    round_: int,
    max_tokens: int,
    processes: ClientProcesses | None = None,
) -> list:
    """Each client's `stream` arrivals; with `processes`, a burst's clients are spread over
    them (their reading then lags less behind 128 streams than one process's)."""
    bodies = [
        chat_body(
            model, [{"role": "user", "content": STORY.format(round=round_, client=i)}], max_tokens
        )
        for i in range(clients)
    ]
    if processes is not None and clients > 1:
        timings = await processes.burst(url, bodies)
        ns = 1e9  # perf_counter's seconds, the same monotonic clock as perf_counter_ns
        return [[int(t.started * ns)] + [int(a * ns) for a in t.arrivals] for t in timings]
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=512)) as c:
        return await asyncio.gather(*(stream(c, url, body) for body in bodies))


def window(marks: list, start: int, end: int) -> list:
    return [m for m in marks if start <= m[0] <= end]


def after(times: list[int], t: int) -> int | None:
    """The first of sorted `times` at or after t."""
    i = bisect.bisect_left(times, t)
    return times[i] if i < len(times) else None


def before(times: list[int], t: int) -> int | None:
    """The last of sorted `times` at or before t."""
    i = bisect.bisect_right(times, t)
    return times[i - 1] if i else None


# `isolation: process`: the model's own process marks its steps and sends (engines/timeline.py
# writes them to a file of its own); the gateway's "in step" is then the wait for them.
CHILD_POINTS = ("child step", "child stepped", "child sends")
CHILD_PARTS = (
    "child process: in step",
    "child process: outputs packed",
    "pipe: pickled, sent, read by the gateway thread",
)


def breakdown(marks: list, arrivals: list[list[int]]) -> dict[str, list[float]]:
    """Per token (per step) durations in ms, from the marks of one measured window."""
    by = {
        point: [m[0] for m in marks if m[1] == point]
        for point in ("step", "stepped", "handed", "loop", "frame", "written") + CHILD_POINTS
    }
    ms = 1e-6
    parts: dict[str, list[float]] = {
        k: []
        for k in (
            "step interval",
            "in step",
            "in step, model thread on CPU",
            "model thread, outside the step",
            *CHILD_PARTS,
            "hop to the loop",
            "loop: outputs to last frame written",
            "frame ready to client read",
            "client interval",
            "loop busy / step interval (ratio)",
        )
    }
    cpu = {m[0]: m[4] for m in marks if m[1] in ("step", "stepped")}  # the thread's CPU ns
    steps = by["step"]
    for i, start in enumerate(steps[:-1]):
        nxt = steps[i + 1]
        parts["step interval"].append((nxt - start) * ms)
        done = after(by["stepped"], start)
        if done is None or done > nxt:
            continue
        parts["in step"].append((done - start) * ms)
        parts["in step, model thread on CPU"].append((cpu[done] - cpu[start]) * ms)
        parts["model thread, outside the step"].append((nxt - done) * ms)
        sent = before(by["child sends"], done)  # isolation: process: what this step received
        if sent is not None and sent >= (before(by["stepped"], start) or 0):
            stepped = before(by["child stepped"], sent)
            began = before(by["child step"], stepped) if stepped is not None else None
            if began is not None:
                parts[CHILD_PARTS[0]].append((stepped - began) * ms)
                parts[CHILD_PARTS[1]].append((sent - stepped) * ms)
                parts[CHILD_PARTS[2]].append((done - sent) * ms)
        handed = after(by["handed"], done)
        if handed is None or handed > nxt:
            continue  # a step without outputs
        taken = after(by["loop"], handed)
        if taken is None:
            continue
        parts["hop to the loop"].append((taken - handed) * ms)
        following = after(by["loop"], taken + 1)
        last = before(by["written"], following if following else taken + 10**9)
        if last is not None and last >= taken:
            parts["loop: outputs to last frame written"].append((last - taken) * ms)
            parts["loop busy / step interval (ratio)"].append((last - taken) / (nxt - start))
    for client in arrivals:
        for arrival in client[1:]:
            ready = before(by["frame"], arrival)
            if ready is not None:
                parts["frame ready to client read"].append((arrival - ready) * ms)
        parts["client interval"] += [(b - a) * ms for a, b in itertools.pairwise(client[1:])]
    return parts


TTFT_PARTS = (
    ("client send to request parsed", "request"),
    ("handler: body read, checked, routed", "submit"),
    ("queue", "inbox"),
    ("hop to the model thread", "admit"),
    ("chat template rendered", "rendered"),
    ("prompt tokenized", "encoded"),
    ("budget, sampler and output parser", "prepared"),
    ("parked caches and disk tier searched", "looked up"),
    ("joined the batch", "admitted"),
    ("prefill, until the step that hands outputs out", "handed"),
    ("hop to the loop", "loop"),
    ("loop: outputs to frame written", "written"),
)


def first_token(marks: list, arrivals: list[int]) -> tuple[dict, dict]:
    """One single-stream request's time to first token, part by part, in ms: each part from
    the previous mark to the first of its own after it, the last to the client's first read.
    Beside it, for a part whose two marks are one thread's, the CPU time that thread spent
    in it (the rest it waited: for the GIL, a lock, the GPU)."""
    by: dict[str, list[list]] = {}
    for m in marks:
        by.setdefault(m[1], []).append(m)
    times = {point: [m[0] for m in of] for point, of in by.items()}
    sent = arrivals[0]
    parts: dict[str, list[float]] = {}
    on_cpu: dict[str, list[float]] = {}
    at, previous = sent, None
    for name, point in TTFT_PARTS:
        if point not in by:  # marked in another process (the add of `isolation: process`)
            continue
        i = bisect.bisect_left(times[point], at)
        if i == len(times[point]):
            return {}, {}
        mark = by[point][i]
        parts[name] = [(mark[0] - at) * 1e-6]
        if previous is not None and previous[3] == mark[3]:
            on_cpu[name] = [(mark[4] - previous[4]) * 1e-6]
        at, previous = mark[0], mark
    if len(arrivals) < 2:
        return {}, {}
    parts["frame written to client read"] = [(arrivals[1] - at) * 1e-6]
    parts["time to first token, as the client saw it"] = [(arrivals[1] - sent) * 1e-6]
    return parts, on_cpu


def burst_arrival(marks: list, arrivals: list[list[int]]) -> dict[str, list[float]]:
    """One burst, from its first request head parsed to its last client's first token, in
    ms: how long the event loop took to take in every head and queue every request, the
    model thread to admit them all (render, tokenize, look up, join), the first step (the
    prefill of the first group), and the step that runs all of them."""
    at: dict[str, list[int]] = {}
    for m in marks:
        at.setdefault(m[1], []).append(m[0])
    steps = [(m[0], m[2]) for m in marks if m[1] == "step"]
    if not all(at.get(p) for p in ("request", "inbox", "admit", "admitted")) or not steps:
        return {}
    first = min(at["request"])
    everyone = next((t for t, n in steps if n >= len(arrivals)), None)
    firsts = [a[1] for a in arrivals if len(a) > 1]
    parts = {
        "first to last request head parsed": max(at["request"]) - first,
        "first head to last request queued": max(at["inbox"]) - first,
        "model thread admitting, first admit to last joined": max(at["admitted"])
        - min(at["admit"]),
        "first head to the first step (first group's prefill)": steps[0][0] - first,
    }
    if everyone is not None:  # the whole burst ran in one step (else: never all at once)
        parts["first head to the first step of all the burst"] = everyone - first
    if firsts:
        parts["first head to the last client's first token"] = max(firsts) - first
    return {name: [ns * 1e-6] for name, ns in parts.items()}


def rows(
    label: str, parts: dict[str, list[float]], on_cpu: dict[str, list[float]] | None = None
) -> list[list[object]]:
    """Median, p10 and p90 of each part; with `on_cpu`, the median CPU time too ("-" for a
    part whose ends are two threads' marks)."""
    out = []
    for name, values in parts.items():
        if not values:
            continue
        row = [label, name, len(values)]
        row += [fmt(v, 3) for v in (median(values), percentile(values, 10), percentile(values, 90))]
        if on_cpu is not None:
            row.append(fmt(median(on_cpu[name]), 3) if on_cpu.get(name) else "-")
        out.append(row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", default=SMOLLM2)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--burst", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--isolation",
        choices=("thread", "process"),
        default="thread",
        help="process: both models in a process of their own (their steps marked there too)",
    )
    parser.add_argument(
        "--stream-interval",
        default="0ms",
        help="the batched model's stream_interval (a busy batch's tokens held, several a frame)",
    )
    parser.add_argument("--marks", help="a folder to keep the raw marks in (marks.jsonl)")
    parser.add_argument(
        "--client-procs",
        type=int,
        default=0,
        help="the burst's clients spread over this many processes (0: in this one)",
    )
    args = parser.parse_args()
    isolation = "\n    isolation: process" if args.isolation == "process" else ""

    load_before = os.getloadavg()
    where = Path(args.marks) if args.marks else Path(tempfile.mkdtemp(prefix="bench-timeline-"))
    where.mkdir(parents=True, exist_ok=True)
    marks_file = where / "marks.jsonl"
    os.environ["GATEWAY_TIMELINE"] = str(marks_file)
    config = CONFIG.format(
        source=args.source,
        concurrency=args.concurrency,
        isolation=isolation,
        interval=args.stream_interval,
    )
    gateway = Gateway(config, "timeline")
    processes = ClientProcesses(args.client_procs) if args.client_procs else None
    windows: dict[str, list] = {
        "serial, 1 stream": [],
        "batched, 1 stream": [],
        "batched, 1 stream, its prompt parked": [],
        f"batched, {args.burst} streams": [],
    }
    try:
        gateway.wait_ready()
        platform = gateway.platform()
        cases = [
            ("serial, 1 stream", "serial", 1),
            ("batched, 1 stream", "batched", 1),
            # The same prompt again (same round, client 0): prefix reuse finds it parked.
            ("batched, 1 stream, its prompt parked", "batched", 1),
            (f"batched, {args.burst} streams", "batched", args.burst),
        ]
        for round_ in range(args.rounds + 1):  # round 0 warms up
            for label, model, clients in cases:
                start = time.perf_counter_ns()
                arrivals = asyncio.run(
                    run(gateway.url, model, clients, round_, args.max_tokens, processes)
                )
                end = time.perf_counter_ns()
                if round_:
                    windows[label].append((start, end, arrivals))
    finally:
        gateway.stop()  # the gateway writes its marks as it exits
        if processes is not None:
            processes.close()
    files = [marks_file, *marks_file.parent.glob(marks_file.name + ".*")]  # children's too
    marks = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    marks.sort()
    body_rows, ttft_rows, burst_rows = [], [], []
    for label, measured in windows.items():
        merged: dict[str, list[float]] = {}
        firsts: dict[str, list[float]] = {}
        firsts_cpu: dict[str, list[float]] = {}
        bursts: dict[str, list[float]] = {}
        for start, end, arrivals in measured:
            marked = window(marks, start, end)
            for name, values in breakdown(marked, arrivals).items():
                merged.setdefault(name, []).extend(values)
            if len(arrivals) > 1:
                for name, values in burst_arrival(marked, arrivals).items():
                    bursts.setdefault(name, []).extend(values)
            if len(arrivals) == 1:
                parts, on_cpu = first_token(marked, arrivals[0])
                for name, values in parts.items():
                    firsts.setdefault(name, []).extend(values)
                for name, values in on_cpu.items():
                    firsts_cpu.setdefault(name, []).extend(values)
        body_rows += rows(label, merged)
        ttft_rows += rows(label, firsts, firsts_cpu)
        burst_rows += rows(label, bursts)
    body = table(["case", "per token", "n", "median ms", "p10", "p90"], body_rows)
    body += "\n\nTime to first token of a single stream, part by part:\n\n" + table(
        ["case", "part", "n", "median ms", "p10", "p90", "thread on CPU, median ms"], ttft_rows
    )
    body += "\n\nA burst's arrival, from its first request head parsed:\n\n" + table(
        ["case", "part", "n", "median ms", "p10", "p90"], burst_rows
    )
    notes = (
        f"isolation: {args.isolation}; the burst's clients in "
        f"{args.client_procs or 'this'} process{'es' if args.client_procs > 1 else ''}. "
        f"{args.rounds} rounds after a warm-up; max_tokens {args.max_tokens}, greedy; a fresh "
        "prompt per client and round, except that the parked case repeats the batched single "
        "stream's. Marks: engines/timeline.py (GATEWAY_TIMELINE). "
        "`loop busy / step interval` is a ratio, not ms."
    )
    report(
        "Per-token timeline through the gateway",
        body,
        platform_path=platform,
        load_before=load_before,
        notes=notes,
    )


if __name__ == "__main__":
    main()
