"""The log's way out: rendered lines written to stdout (and the log file) by one thread.

Writing and flushing on the event loop would stall every client whenever stdout is slow —
a terminal scrolling, a pipe whose reader lags, a full pipe nobody reads. Here the loop
only queues the line; a writer thread drains the queue and writes what has gathered in one
go, flushing once per batch. Lines still reach the file within a moment (tests and `tail
-f` read them as they come). When the queue is full (a reader stalled for a long time),
new lines are counted and dropped, and a `log_lines_dropped` line says how many
(`Handoff`: a put costs the loop one C call, and a request's lines one wake of the thread).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from collections.abc import Callable
from typing import IO

import msgspec

from engines import timeline
from gateway.logs.handoff import Handoff

QUEUE_LINES = 100_000  # lines held while the streams are blocked, before dropping
_STOP = object()


class LineWriter:
    """A structlog logger: each line is queued for the writer thread, then given to `taps()`."""

    def __init__(self, streams: list[IO[str]], taps: Callable[[], list[Callable[[str], None]]]):
        self._streams = streams
        self._taps = taps
        self._queue: Handoff[object] = Handoff(QUEUE_LINES)
        self._thread = threading.Thread(target=self._write, name="log-writer", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def msg(self, line: str) -> None:
        self._queue.offer(line)
        for tap in self._taps():  # in the emitter's context: the app the line belongs to
            tap(line)

    debug = info = warning = error = critical = exception = msg

    def close(self, timeout: float = 5) -> None:
        """Write what is queued, then stop (at exit; bounded, in case a stream is stuck)."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _write(self) -> None:
        while True:
            batch = self._queue.take(4096)
            if timeline.ON:
                timeline.mark("log lines", len(batch))
            stop = _STOP in batch
            lines = [line for line in batch if line is not _STOP]
            if dropped := self._queue.take_dropped():
                lines.append(_dropped_line(dropped))
            text = "".join(f"{line}\n" for line in lines)
            for stream in self._streams:
                with contextlib.suppress(OSError, ValueError):  # a closed stream: nowhere to say
                    stream.write(text)
                    stream.flush()
            if timeline.ON:
                timeline.mark("log written")
            if stop:
                return


def _dropped_line(count: int) -> str:
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z"
    event = {"event": "log_lines_dropped", "ts": ts, "level": "warning", "count": count}
    return msgspec.json.encode(event).decode()
