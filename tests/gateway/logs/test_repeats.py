"""Library errors that recur on every loop turn (accept() out of file descriptors) are
written once per window, then counted, instead of flooding stderr."""

from __future__ import annotations

import io
import logging

from gateway.logs.repeats import RepeatFilter


def test_identical_errors_are_written_once_a_window_and_counted(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("gateway.logs.repeats.time.monotonic", lambda: clock[0])
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RepeatFilter(window=10))
    logger = logging.getLogger("test.repeats")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for _ in range(10_000):
            try:
                raise OSError(24, "Too many open files")
            except OSError:
                logger.exception("socket.accept() out of system resource")
        logger.error("another message")
        clock[0] += 11
        logger.error("socket.accept() out of system resource", exc_info=OSError(24, "x"))
    finally:
        logger.removeHandler(handler)
    lines = [
        line
        for line in stream.getvalue().splitlines()
        if not line.startswith((" ", "Traceback", "OSError"))
    ]
    assert lines == [
        "socket.accept() out of system resource",
        "another message",
        "socket.accept() out of system resource (9999 identical messages held back in 10s)",
    ]
