"""An event loop on a thread of its own: where an upstream engine's HTTP work runs.

The Engine protocol is blocking (its methods run on the runner's thread), while streaming
from many replicas at once wants one event loop. Each loaded upstream engine owns one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Work started here runs in a copy of the context the thread was made in (the app's, so
    events reach its listeners), unless `spawn` is given a request's own."""

    def __init__(self, name: str) -> None:
        self._context = contextvars.copy_context()
        self.loop = asyncio.new_event_loop()
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `work` on the loop and wait for its result (from any other thread)."""
        return self.start(work).result(timeout)

    def start(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `work` on the loop; its future, to wait on or cancel from another thread."""
        # The task takes the context current when it is scheduled: the thread's own.
        return self._context.copy().run(asyncio.run_coroutine_threadsafe, work, self.loop)

    def spawn(
        self, work: Coroutine[Any, Any, None], context: contextvars.Context | None = None
    ) -> None:
        """Start `work` on the loop without waiting; in `context` (a request's log context)."""

        def start() -> None:
            task = self.loop.create_task(work)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        self.loop.call_soon_threadsafe(start, context=context or self._context.copy())

    def stop(self) -> None:
        """Cancel whatever still runs, then end the loop and its thread."""

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            self.call(cancel_all(), timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self.loop.close()
