"""Waiting on a runner while watching the client: a client that leaves stops its job."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

import msgspec
from litestar import Request

from engines.errors import ClientGone
from schemas.canonical import (
    Finished,
    Logprobs,
    Output,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCall,
    ToolCallOutput,
)

T = TypeVar("T")


async def _until_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """Await `work`; if the client disconnects first, cancel it and raise `ClientGone`.

    Cancelling `work` unwinds the runner's result generator, which withdraws the job from
    its queue (or stops its generation within a token).
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_until_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise ClientGone("client disconnected")


class Collected(msgspec.Struct, frozen=True, kw_only=True):
    """A whole answer: its text, its tool calls and the engine's accounting."""

    text: str
    tool_calls: list[ToolCall]
    finished: Finished
    reasoning: str = ""  # the model's thinking, when the request asked to see it
    logprobs: list[TokenLogprob] = []  # of the generated tokens, when asked for
    prompt_logprobs: list[TokenLogprob] = []  # of the prompt's tokens (completions' echo)


async def collect(results: AsyncIterator[Output]) -> Collected:
    """All of a job's outputs, gathered into one answer."""
    parts: list[str] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    logprobs: dict[bool, list[TokenLogprob]] = {False: [], True: []}
    async for output in results:
        if isinstance(output, Logprobs):
            logprobs[output.prompt] += output.tokens
        elif isinstance(output, TextDelta):
            parts.append(output.text)
        elif isinstance(output, ReasoningDelta):
            thoughts.append(output.text)
        elif isinstance(output, ToolCallOutput):
            calls.append(output.call)
        elif isinstance(output, Finished):
            text, reasoning = "".join(parts), "".join(thoughts)
            return Collected(
                text=text,
                tool_calls=calls,
                finished=output,
                reasoning=reasoning,
                logprobs=logprobs[False],
                prompt_logprobs=logprobs[True],
            )
    raise RuntimeError("engine ended without a Finished output")
