"""The pulls asked for over HTTP (`/api/pull`): a few threads of their own, never the event
loop's default executor.

That executor is shared with everything that runs a moment of work off the loop (token
counts, a reload's parse, the response store): downloads that wait on the network there —
a stalled Hub, pulls whose clients left — would take every thread and stall all of it. A
pull beyond `workers` is refused at once (`QueueFull`: 429 with `Retry-After`) instead of
waiting, as a client that asks again later costs nothing while it waits.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from engines.errors import QueueFull

T = TypeVar("T")

DEFAULT_PULL_WORKERS = 2
RETRY_AFTER_S = 10.0  # about what a Hub request may wait before its timeout frees a slot


class PullStopped(Exception):
    """Raised from a pull's progress callback once its client has left."""


class PullPool:
    """At most `workers` downloads at once, each on one of the pool's own threads."""

    def __init__(self, workers: int = DEFAULT_PULL_WORKERS) -> None:
        self.workers = workers
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="pull")
        self._lock = threading.Lock()  # taken on the loop and released on the pull's thread
        self._running = 0

    def run(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """Start `work` on a free thread; `QueueFull` when all are busy.

        A slot is held until `work` returns, not until its client leaves: a transfer that
        is stopping still holds a connection to the Hub.
        """
        with self._lock:
            if self._running >= self.workers:
                raise QueueFull(
                    f"{self.workers} pulls are downloading already; retry when one is done "
                    "(or run `gateway pull` on the host)",
                    RETRY_AFTER_S,
                )
            self._running += 1

        def held() -> T:
            try:
                return work()
            finally:
                with self._lock:
                    self._running -= 1

        return asyncio.get_running_loop().run_in_executor(self._executor, held)

    def close(self) -> None:
        """No new pulls; those running end at their next progress report or timeout."""
        self._executor.shutdown(wait=False, cancel_futures=True)
