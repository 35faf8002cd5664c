"""Several answers to one request (`n`) gathered or interleaved, and the protocol fields a
gateway refuses by name. (The door, `engines/chat.py`, caps `n` and submits the answers
together so the runner batches them.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from engines.errors import BadRequest
from gateway.http.streaming import Collected, collect
from schemas.canonical import Output

_DONE = object()


def refuse_set(data: Any, fields: dict[str, Callable[[Any], bool]], why: str = "") -> None:
    """A 400 naming the first of `fields` whose value its test calls harmful (set, not
    the protocol's no-op value)."""
    for name, harmful in fields.items():
        value = getattr(data, name)
        if value is not None and harmful(value):
            raise BadRequest(f"$.{name} is not supported by this gateway{why}")


async def collect_all(streams: list[AsyncIterator[Output]]) -> list[Collected]:
    """Every answer whole; all run at once (one batch), and one failing stops the rest."""
    tasks = [asyncio.ensure_future(collect(s)) for s in streams]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def merged(streams: list[AsyncIterator[Output]]) -> AsyncIterator[tuple[int, Output]]:
    """Outputs of every answer as they come, tagged with the answer's index."""
    if len(streams) == 1:
        try:
            async for output in streams[0]:
                yield 0, output
        finally:
            await streams[0].aclose()
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[Output]) -> None:
        try:
            async for output in stream:
                await queue.put((index, output))
        except Exception as error:  # travels to the reader, raised there
            await queue.put((index, error))
        finally:
            await queue.put((index, _DONE))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    running = len(tasks)
    try:
        while running:
            index, item = await queue.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for stream in streams:
            await stream.aclose()
