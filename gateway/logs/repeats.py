"""Library logs (uvicorn, asyncio) on stderr, with repeats held back.

A fault that recurs on every event-loop turn — `accept()` failing once the process is out
of file descriptors — would otherwise write the same traceback hundreds of thousands of
times (200 MB in 100 s was seen). The first of a kind is written; identical ones within
`window` seconds are only counted, and the next one after that says how many were held.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import OrderedDict

WINDOW_S = 10.0
_KINDS = 256  # distinct messages remembered


class RepeatFilter(logging.Filter):
    """Passes a record unless an identical one passed less than `window` seconds ago."""

    def __init__(self, window: float = WINDOW_S) -> None:
        super().__init__()
        self._window = window
        self._seen: OrderedDict[tuple, tuple[float, int]] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        key = (record.name, record.levelno, record.getMessage(), type(error))
        now = time.monotonic()
        last, held = self._seen.get(key, (-self._window, 0))
        if now - last < self._window:
            self._seen[key] = (last, held + 1)
            return False
        if held:
            record.msg = f"{record.msg} ({held} identical messages held back in {self._window:g}s)"
        self._seen[key] = (now, 0)
        self._seen.move_to_end(key)
        while len(self._seen) > _KINDS:
            self._seen.popitem(last=False)
        return True


def log_library_errors() -> None:
    """Send every library's warnings and errors to stderr, repeats held back."""
    repeats = RepeatFilter()
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.addFilter(repeats)
    logging.getLogger().addHandler(handler)
    # On the loggers too, not only on this handler: a record is held back before it
    # reaches any handler another library adds to the root logger.
    for name in ("asyncio", "uvicorn", "uvicorn.error"):
        logging.getLogger(name).addFilter(repeats)
