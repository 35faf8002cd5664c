"""A per-token timeline of the hot path, kept only when asked for: where a token's time goes
between the model's step and the socket.

`GATEWAY_TIMELINE=/path/file.jsonl gateway serve ...` records, in memory, a mark at each
point a token passes (the model thread's step begins and ends, its outputs are handed to the
event loop, the loop takes them, a protocol frame is ready, the frame is written) and writes
them out when the process ends (a model's own process, `isolation: process`, marks its steps
and its sends in a file of its own). `bench/timeline.py` lines them up against the client's own
arrival times. Off (the default), each point costs one global lookup.

The clock is `time.perf_counter_ns()`: CLOCK_MONOTONIC on Linux and macOS, so marks compare
with a client's in another process on the same machine. Each mark also carries its thread's
CPU time (`time.thread_time_ns()`): between two marks of one thread, wall time the thread
did not spend on a CPU is time it waited (for the GIL, a lock, the GPU, the scheduler).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time

PATH = os.environ.get("GATEWAY_TIMELINE") or None
ON = PATH is not None

# (ns, point, count, thread id, thread CPU ns). list.append is atomic under the GIL: threads
# need no lock.
_marks: list[tuple[int, str, int, int, int]] = []


def mark(point: str, count: int = 0) -> None:
    """Record that `count` things (sequences, outputs) passed `point` now."""
    _marks.append(
        (time.perf_counter_ns(), point, count, threading.get_ident(), time.thread_time_ns())
    )


def dump() -> None:
    """Write the marks, one JSON array per line, to GATEWAY_TIMELINE; a model's own process
    (`isolation: process`, which inherits the variable) to GATEWAY_TIMELINE.<its pid>."""
    if not ON:
        return
    import multiprocessing

    path = PATH if multiprocessing.parent_process() is None else f"{PATH}.{os.getpid()}"
    with open(path, "w") as out:
        for entry in _marks:
            out.write(json.dumps(entry) + "\n")


atexit.register(dump)

if ON:  # a collection holds the GIL for its whole pass: mark each, with its generation
    import gc

    gc.callbacks.append(lambda phase, info: mark(f"gc {phase}", info["generation"]))
