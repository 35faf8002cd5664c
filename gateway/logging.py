"""structlog set-up: one JSON object per line, to stdout and optionally a file."""

from __future__ import annotations

import logging
import sys
from typing import IO, Any

import msgspec
import structlog

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


class LineWriter:
    """A structlog logger that writes each rendered line to every stream it holds."""

    def __init__(self, streams: list[IO[str]]) -> None:
        self._streams = streams

    def msg(self, line: str) -> None:
        for stream in self._streams:
            stream.write(line + "\n")
            stream.flush()

    debug = info = warning = error = critical = exception = msg


def _render(_logger: Any, _name: str, event: dict[str, Any]) -> str:
    # The fields every line has come first, so a line reads well in a terminal too.
    head = {key: event.pop(key) for key in ("event", "ts", "level", "request_id") if key in event}
    return msgspec.json.encode(head | event).decode()


def setup_logging(level: str = "info", log_file: str | None = None) -> None:
    """Route every event to stdout (and `log_file`) as JSON lines, filtered by `level`."""
    streams: list[IO[str]] = [sys.stdout]
    if log_file:
        streams.append(open(log_file, "a", encoding="utf-8"))  # noqa: SIM115 - lives with the process
    writer = LineWriter(streams)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
            _render,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=lambda *_: writer,
        cache_logger_on_first_use=False,
    )
