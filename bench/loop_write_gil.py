"""Does the event loop's socket write keep the GIL from a model thread? uvloop against asyncio.

    .venv/bin/python bench/loop_write_gil.py [--rounds 3] [--streams 128] [--frames 400]

uvloop writes a transport's bytes with `write(2)` while holding the GIL; asyncio's
`sock.send` lets the GIL go for the system call. That looked like a way to give the model
thread the time of the gateway's 128 socket writes a step. Here, per round and loop, in a
process of its own: the loop writes `--frames` SSE-sized frames to each of `--streams`
socket pairs (yielding between rounds of writes, as a step's hand-out does; a thread drains
the other ends), while a worker thread runs Python without pause (as a model thread building
its next step). Reported: the loop's frames per second and the worker's units of work per
second.
"""

from __future__ import annotations

import argparse
import os

from common import fmt, median, report, run_worker, table

WORKER = r"""
import asyncio, json, selectors, socket, sys, threading, time

streams, frames, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
FRAME = b'data: {"id":"chatcmpl-x","choices":[{"index":0,"delta":{"content":" word"}}]}\n\n'


def python_work(stop, done):
    units = 0
    while not stop.is_set():
        sum(i * i for i in range(200))
        units += 1
    done.append(units)


def drain(pairs, stop):
    selector = selectors.DefaultSelector()
    for _, theirs in pairs:
        theirs.setblocking(False)
        selector.register(theirs, selectors.EVENT_READ)
    while not stop.is_set():
        for key, _ in selector.select(0.01):
            try:
                key.fileobj.recv(1 << 20)
            except BlockingIOError:
                pass


async def main():
    loop = asyncio.get_running_loop()
    pairs = [socket.socketpair() for _ in range(streams)]
    transports = [
        (await loop.create_connection(asyncio.Protocol, sock=ours))[0] for ours, _ in pairs
    ]
    stop_drain, stop_work, done = threading.Event(), threading.Event(), []
    threading.Thread(target=drain, args=(pairs, stop_drain), daemon=True).start()
    worker = threading.Thread(target=python_work, args=(stop_work, done))
    worker.start()
    start = time.perf_counter()
    for _ in range(frames):
        for transport in transports:
            transport.write(FRAME)
        await asyncio.sleep(0)
    seconds = time.perf_counter() - start
    stop_work.set()
    worker.join()
    stop_drain.set()
    print(json.dumps({"frames_per_s": streams * frames / seconds,
                      "work_per_s": done[0] / seconds}), file=sys.stderr)


if kind == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""


def one_round(kind: str, streams: int, frames: int) -> dict:
    return run_worker(WORKER, str(streams), str(frames), kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=128)
    parser.add_argument("--frames", type=int, default=400)
    args = parser.parse_args()
    load_before = os.getloadavg()
    kinds = ["uvloop", "asyncio"]
    results: dict[str, list[dict]] = {k: [] for k in kinds}
    for round_ in range(args.rounds):
        for kind in kinds if round_ % 2 == 0 else reversed(kinds):
            results[kind].append(one_round(kind, args.streams, args.frames))
            r = results[kind][-1]
            print(f"round {round_} {kind}: {r['frames_per_s']:.0f} frames/s, "
                  f"{r['work_per_s']:.0f} units/s", flush=True)  # fmt: skip
    rows = []
    for kind, rs in results.items():
        frames = [r["frames_per_s"] for r in rs]
        work = [r["work_per_s"] for r in rs]
        rows.append([kind, fmt(median(frames), 0), f"{fmt(min(frames), 0)}-{fmt(max(frames), 0)}",
                     fmt(median(work), 0), f"{fmt(min(work), 0)}-{fmt(max(work), 0)}"])  # fmt: skip
    body = table(["loop", "frames/s (median)", "spread", "worker units/s (median)", "spread"], rows)
    notes = (
        f"{args.rounds} rounds, the loops alternating first, each in a process of its own: "
        f"{args.frames} frames to each of {args.streams} socket pairs, a worker thread running "
        "Python meanwhile."
    )
    report("Event loop: a socket write and the GIL, uvloop against asyncio", body,
           platform_path=None, load_before=load_before, notes=notes)  # fmt: skip


if __name__ == "__main__":
    main()
