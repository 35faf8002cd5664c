"""Several answers to one request (`n`), and the protocol fields a gateway refuses by name.

`n` answers are `n` jobs submitted together, so the runner admits them into one batch
(up to the model's `concurrency`); `guardrails.max_n` caps how many one request may ask.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from msgspec.structs import replace

from engines.errors import BadRequest
from engines.policy.answer import answer
from engines.runner import Runner
from gateway.http.streaming import Collected, collect
from schemas.canonical import ChatRequest, Output
from schemas.config import ModelConfig

_DONE = object()


def check_n(model: ModelConfig, n: int | None, field: str = "$.n") -> int:
    """How many answers were asked for, within the model's `guardrails.max_n`."""
    n = n or 1
    if n > model.guardrails.max_n:
        raise BadRequest(
            f"{field} is {n}; model {model.id!r} gives at most {model.guardrails.max_n} "
            "answers per request (guardrails.max_n)"
        )
    return n


def refuse_set(data: Any, fields: dict[str, Callable[[Any], bool]], why: str = "") -> None:
    """A 400 naming the first of `fields` whose value its test calls harmful (set, not
    the protocol's no-op value)."""
    for name, harmful in fields.items():
        value = getattr(data, name)
        if value is not None and harmful(value):
            raise BadRequest(f"$.{name} is not supported by this gateway{why}")


def variants(request: ChatRequest, n: int) -> list[ChatRequest]:
    """The request `n` times; a seed becomes seed, seed+1, ... so the answers differ and
    each stays reproducible."""
    seed = request.sampling.seed
    if n == 1 or seed is None:
        return [request] * n
    return [replace(request, sampling=replace(request.sampling, seed=seed + i)) for i in range(n)]


def answers(runner: Runner, requests: list[ChatRequest]) -> list[AsyncIterator[Output]]:
    return [answer(runner, r) for r in requests]


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
