"""The event loop's cost per streamed frame with many streams, and where it goes.

    .venv/bin/python bench/loop_frames.py [--streams 128] [--tokens 2000] [--rounds 5]
        [--bursts 1]  # per round
        [--profile]   # with py-spy installed: the loop thread's time by function
        [--at REV]    # also commit REV's gateway, rounds interleaved: the ratio between them

`--tokens 1` measures what a burst of arrivals costs (request parsed, checked, routed,
answered) rather than the frames of long streams: read its loop CPU a stream, the gateway's
main thread's CPU time per request, which is what a burst's requests cost the GIL the model
threads need before the first step (on the H200, 128 arrivals took the loop ~115 ms).

A scripted model (`concurrency: --streams`, no delay between tokens: no model work) answers
`--streams` streamed chats at once, each read by a minimal raw-socket client (asyncio
streams, no HTTP library: the client's own cost stays small beside the gateway's). Reported
per round: SSE frames per second through the gateway. This is the CPU side of issue 32's
"how 128 streams of frames leave the batch": on the H200, 128 streams had the loop busy half
of each 9 ms step (bench/RESULTS.md, run 13's timeline). With `--profile`, py-spy samples the
gateway meanwhile and the loop thread's inclusive and own time per function are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import Gateway, cpu_seconds, fmt, median, report, table, tree_at

CONFIG = """
server: {{host: 127.0.0.1}}
models:
  - id: echo
    engine: scripted
    concurrency: {streams}
    script: {{reply: "{reply}", token_delay: 0}}
"""


async def one_stream(port: int, request: bytes) -> int:
    """One streamed chat on its own connection; the SSE frames it read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    frames = 0
    while data := await reader.read(65536):
        frames += data.count(b"data: ")
    writer.close()
    return frames


async def burst(port: int, streams: int, tokens: int) -> tuple[int, float]:
    body = json.dumps(
        {
            "model": "echo",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "max_tokens": tokens,
        }
    ).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    ) + body
    started = time.perf_counter()
    counts = await asyncio.gather(*(one_stream(port, request) for _ in range(streams)))
    return sum(counts), time.perf_counter() - started


def loop_profile(raw: Path, top: int = 12) -> str:
    """The main (event loop) thread's samples: inclusive and own share per function."""
    inclusive, own, total = Counter(), Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if "MainThread" not in frames[0] or len(frames) < 2:
            continue
        n = int(count)
        total += n
        names = [f.split(" (")[0] + " (" + f.rsplit("/", 1)[-1] for f in frames[1:]]
        for name in set(names):
            inclusive[name] += n
        own[names[-1]] += n
    rows = [["own", name, fmt(100 * n / total, 1)] for name, n in own.most_common(top)]
    roots = max(inclusive.values()) * 0.97  # the loop's own frames (run_forever, ...)
    rows += [
        ["inclusive", name, fmt(100 * n / total, 1)]
        for name, n in inclusive.most_common(80)
        if n < roots
    ][:top]
    return table(["time", "function", "% of the loop thread's samples"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--bursts", type=int, default=1, help="bursts per round (more: a finer CPU reading)"
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--at", metavar="REV", help="also run the gateway of commit REV, rounds interleaved"
    )
    args = parser.parse_args()
    load_before = os.getloadavg()
    reply = " ".join(f"w{i}" for i in range(args.tokens))
    config = CONFIG.format(streams=args.streams, reply=reply)
    with contextlib.ExitStack() as stack:
        sides = {"this tree": Gateway(config, "loop-frames")}
        if args.at:
            older = tree_at(args.at, Path(stack.enter_context(tempfile.TemporaryDirectory())))
            sides[f"at {args.at}"] = Gateway(config, "loop-frames-at", code=older)
        rates, profile, platform, loop_us = measure(sides, args)
    rows = [
        [
            side,
            args.streams,
            fmt(median(r), 0),
            f"{fmt(min(r), 0)}-{fmt(max(r), 0)}",
            fmt(1e6 / median(r), 1),
            fmt(median(loop_us[side]), 0),
            f"{fmt(min(loop_us[side]), 0)}-{fmt(max(loop_us[side]), 0)}",
        ]
        for side, r in rates.items()
    ]
    header = ["gateway", "streams", "frames/s (median)", "spread over rounds"]
    header += ["µs of wall time per frame", "loop CPU µs a stream (median)", "spread"]
    body = table(header, rows)
    if args.at:
        for what, values in (("frames/s", rates), ("loop CPU a stream", loop_us)):
            ratios = [a / b for a, b in zip(*values.values(), strict=True)]
            body += (
                f"\n\nThis tree / {args.at}, {what}: {fmt(median(ratios), 3)} (median of "
                f"per-round ratios, {fmt(min(ratios), 3)}-{fmt(max(ratios), 3)})"
            )
    if profile:
        body += "\n\nThe event loop thread under py-spy (200 Hz, every round):\n\n" + profile
    notes = (
        f"{args.rounds} rounds after a warm-up; per round {args.bursts} x {args.streams} streamed "
        "chats at once "
        f"on their own connections, {args.tokens} words each from the scripted engine (no "
        "delay), read by raw-socket clients in this process; with `--at`, the two gateways "
        "take turns, the first of each round alternating. Frames: every SSE `data:` line read. "
        "Loop CPU: the gateway's main thread's CPU time (/proc) over the round, per stream."
    )
    report(
        "Event loop: streamed frames per second with many streams",
        body,
        platform_path=platform,
        load_before=load_before,
        notes=notes,
    )


def measure(sides: dict[str, Gateway], args) -> tuple[dict[str, list[float]], str, dict, dict]:
    """Frames/s per round of each side, and its event loop's CPU µs per stream; the
    profile of the first (with --profile)."""
    rates: dict[str, list[float]] = {side: [] for side in sides}
    loop_us: dict[str, list[float]] = {side: [] for side in sides}
    profile = ""
    try:
        for gateway in sides.values():
            gateway.wait_ready()
            asyncio.run(burst(gateway.port, args.streams, args.tokens))  # warm-up
        first = next(iter(sides.values()))
        platform = first.platform()
        spy, raw = start_profile(first.process.pid) if args.profile else (None, None)
        for round_ in range(args.rounds):
            order = list(sides.items())
            for side, gateway in order if round_ % 2 == 0 else order[::-1]:
                pid = gateway.process.pid
                cpu, frames, seconds = cpu_seconds(pid, pid), 0, 0.0
                for _ in range(args.bursts):
                    more, took = asyncio.run(burst(gateway.port, args.streams, args.tokens))
                    frames, seconds = frames + more, seconds + took
                streams = args.streams * args.bursts
                loop_us[side].append(1e6 * (cpu_seconds(pid, pid) - cpu) / streams)
                rates[side].append(frames / seconds)
                print(
                    f"round {round_} {side}: {frames} frames in {seconds:.2f} s, "
                    f"loop CPU {loop_us[side][-1]:.0f} µs a stream",
                    flush=True,
                )
        if spy is not None:
            spy.send_signal(2)  # py-spy writes its samples on SIGINT
            spy.wait(timeout=60)
            profile = loop_profile(raw)
    finally:
        for gateway in sides.values():
            gateway.stop()
    return rates, profile, platform, loop_us


def start_profile(pid: int) -> tuple[subprocess.Popen, Path]:
    """py-spy sampling `pid`'s threads, and the raw file it writes on SIGINT."""
    raw = Path(tempfile.mkdtemp(prefix="bench-loop-")) / "raw.txt"
    spy_bin = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy_bin).exists():
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    command = [spy_bin, "record", "-p", str(pid), "-r", "200", "-f", "raw", "-o", str(raw)]
    spy = subprocess.Popen(
        [*command, "--threads"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    time.sleep(1)
    return spy, raw


if __name__ == "__main__":
    main()
