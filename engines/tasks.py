"""Background work that is kept until it ends, and whose failure is logged, never lost.

asyncio holds only a weak reference to a task: one created and not kept can be collected
mid-flight, and an exception in one nobody awaits surfaces (if ever) as "Task exception was
never retrieved" on stderr. `Tasks.spawn` keeps each task until it is done and logs a
failure as one `task_failed` event with its traceback.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Coroutine
from typing import Any

from engines.log import emit
from schemas.events import TaskFailed


class Tasks:
    """A set of running background tasks, each with a name that says what it does."""

    def __init__(self) -> None:
        self._running: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._running)

    def spawn(self, work: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run `work` in the background, kept until it ends; a failure is logged."""
        task = asyncio.ensure_future(work)
        task.set_name(name)
        self._running.add(task)
        task.add_done_callback(self._done)
        return task

    async def wait(self) -> None:
        """Until every task running now has ended (failures are logged, not raised)."""
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._running.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        emit(
            TaskFailed(
                task=task.get_name(),
                error=f"{type(error).__name__}: {error}",
                traceback="".join(traceback.format_exception(error)),
            ),
            level="error",
        )
