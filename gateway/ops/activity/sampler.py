"""Every few seconds, each runner's queue depth, running count and memory held, into the
Activity store: the plots' queue and memory series. Reads attributes only, on the loop."""

from __future__ import annotations

import asyncio
import time

from engines.base import EngineState
from gateway.control.registry import Registry
from gateway.ops.activity.store import ActivityStore

SAMPLE_EVERY_S = 5.0


async def sample_runners(store: ActivityStore, registry: Registry) -> None:
    """Runs for the gateway's lifespan (cancelled at shutdown)."""
    while True:
        runners = registry.current.runners
        store.sample(
            time.time(),
            [
                (
                    model,
                    runner.queue_depth,
                    runner.running,
                    runner.memory_bytes if runner.state is EngineState.READY else 0,
                )
                for model, runner in runners.items()
            ],
        )
        await asyncio.sleep(SAMPLE_EVERY_S)
