"""Background tasks (loads, idle unloads, the SIGHUP reload, the drain, a reload's old
runners) are kept until they end, and a failure nobody awaits is logged as `task_failed`."""

from __future__ import annotations

import asyncio
import gc
import weakref

from structlog.testing import capture_logs

from engines.tasks import Tasks


async def test_a_background_task_is_kept_until_it_ends_and_its_failure_is_logged():
    tasks = Tasks()
    release = asyncio.Event()

    async def doomed() -> None:
        await release.wait()
        raise RuntimeError("boom in the background")

    task = weakref.ref(tasks.spawn(doomed(), "doomed work"))
    await asyncio.sleep(0)
    gc.collect()  # nobody else holds the task: only the set keeps it from being collected
    assert task() is not None and len(tasks) == 1
    with capture_logs() as logs:
        release.set()
        for _ in range(5):
            await asyncio.sleep(0)
    assert len(tasks) == 0
    [logged] = [e for e in logs if e["event"] == "task_failed"]
    assert logged["log_level"] == "error"
    assert logged["task"] == "doomed work"
    assert logged["error"] == "RuntimeError: boom in the background"
    assert "in doomed" in logged["traceback"]


async def test_a_cancelled_or_finished_task_logs_nothing():
    tasks = Tasks()
    with capture_logs() as logs:
        done = tasks.spawn(asyncio.sleep(0), "quick")
        stopped = tasks.spawn(asyncio.sleep(60), "stopped")
        await asyncio.sleep(0)
        stopped.cancel()
        await asyncio.gather(done, stopped, return_exceptions=True)
        await asyncio.sleep(0)
    assert len(tasks) == 0 and logs == []
