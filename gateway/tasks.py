"""Background tasks: started, not awaited, yet never lost.

asyncio holds only a weak reference to a running task, so one nobody keeps may be
collected mid-flight; and a task that fails with nobody awaiting it fails silently. A
`TaskSet` keeps each task until it ends and logs a failure as `internal_error`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from gateway.errors import unexpected


class TaskSet:
    """The tasks one owner (an app, a reloader, a server) started and has not awaited."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, work: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run `work` in the background, kept until it ends; a failure is logged."""
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            unexpected(error, f"task {task.get_name()}")
