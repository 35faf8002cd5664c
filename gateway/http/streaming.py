"""Waiting on a runner while watching the client (a client that leaves stops its job), and
the one stream helper every protocol's streamed answer goes through."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import msgspec
from litestar import Request
from litestar.response import Stream
from litestar.response.sse import ServerSentEventMessage
from litestar.response.streaming import ASGIStreamingResponse
from litestar.types import Receive, Send

from engines import timeline
from engines.errors import ClientGone
from gateway.http.errors import stream_failure
from schemas.canonical import Finished, Output, ReasoningDelta, TextDelta, ToolCall, ToolCallOutput
from schemas.logprobs import Logprobs, TokenLogprob

T = TypeVar("T")
F = TypeVar("F")  # one frame of a stream: an SSE message, a JSON line


async def _watched(receive: Receive, work: Awaitable[T]) -> T:
    """Await `work` in the caller's task while one watcher task reads `receive`; if the
    client disconnects first, the caller's task is cancelled (so `work` unwinds there) and
    `ClientGone` raised. A cancellation from elsewhere (the ops page's cancel, shutdown) passes.

    Not `work` in a task of its own raced against the watcher, nor an anyio task group:
    every request passes here on the event loop the model threads share the GIL with."""
    awaiting = asyncio.current_task()
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        awaiting.cancel()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        result = await work
    except asyncio.CancelledError:
        if not gone:
            raise
    finally:
        watcher.cancel()
    if not gone:
        return result
    awaiting.uncancel()
    raise ClientGone("client disconnected")


async def unless_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """Await `work`; if the client disconnects first, cancel it and raise `ClientGone`.

    Cancelling `work` unwinds the runner's result generator, which withdraws the job from
    its queue (or stops its generation within a token).
    """
    return await _watched(request.receive, work)


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


# The one way every protocol streams an answer: `started` waits for the first output, so an
# error before it (queue full, model failed to load, bad request) is still the response's
# HTTP status; `stream_body` then frames the rest, ends a failure with the protocol's own
# in-stream error (the 200 is out), and always runs the cleanup that stops the job(s).


async def started(request: Request, results: AsyncIterator[T]) -> AsyncIterator[T]:
    """`results` once its first output is in; it yields that output first, then the rest.

    A failure (or the client leaving) before the first output is raised here, with
    `results` closed, so it becomes the response's status.
    """
    try:
        first = await unless_client_leaves(request, anext(results))
    except BaseException:
        await results.aclose()
        raise
    return _resumed(first, results)


async def _resumed(first: T, rest: AsyncIterator[T]) -> AsyncIterator[T]:
    try:
        yield first
        async for item in rest:
            yield item
    finally:
        await rest.aclose()


async def stream_body(
    request: Request,
    frames: AsyncIterator[F],
    error_tail: Callable[[int, str, str], F],
    cleanup: Callable[[], Awaitable[None]],
    encode: Callable[[F], object] = lambda frame: frame,
) -> AsyncIterator:
    """A stream's body after its status line: the protocol's `frames`, each through
    `encode`; if anything fails, one last frame from `error_tail(status, message, kind)`
    (the protocol's in-stream error); and in every case, the client gone included,
    `cleanup` (which stops the job within a token)."""
    try:
        async for frame in frames:
            if timeline.ON:
                timeline.mark("frame")
            yield encode(frame)
            if timeline.ON:  # the server has taken the frame: it is on its way to the socket
                timeline.mark("written")
    except Exception as error:
        yield encode(error_tail(*stream_failure(request, error)))
    finally:
        await frames.aclose()
        await cleanup()


class _WatchedBody(ASGIStreamingResponse):
    """litestar's streaming response, with the client watched on plain asyncio.

    litestar runs the body in an anyio task group beside a task that reads `receive` for the
    client's leaving, and cancels the group then; and when every stream ends, since the
    server then answers `receive` with a disconnect too. That is two tasks, a group and a
    cancel scope a response, and anyio's `cancel` formats the task's repr each time: ~8% of
    the event loop's time per streamed request. Here `_watched` sends the body in the
    response's own task and cancels it only if the client leaves first: the stream's
    generator is closed (its `finally` stops the job) and the response ends quietly, as
    litestar's did."""

    __slots__ = ()

    async def send_body(self, send: Send, receive: Receive) -> None:
        with contextlib.suppress(ClientGone):  # ended quietly: nobody to tell
            await _watched(receive, self._stream(send))


class Streamed(Stream):
    """litestar's `Stream` response, sent by `_WatchedBody`: every streamed answer's."""

    def to_asgi_response(self, *args, **kwargs) -> ASGIStreamingResponse:
        response = super().to_asgi_response(*args, **kwargs)
        response.__class__ = _WatchedBody  # the same slots; only `send_body` differs
        return response


# What litestar's ServerSentEvent response sends besides the media type.
SSE_HEADERS = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}


def sse_response(
    request: Request,
    frames: AsyncIterator[str | ServerSentEventMessage],
    error_tail: Callable[[int, str, str], str | ServerSentEventMessage],
    cleanup: Callable[[], Awaitable[None]],
) -> Streamed:
    """A streamed answer as server-sent events: `stream_body`'s frames, each a `data:`
    text or a message with its `event:` name, framed here.

    Framed in one step rather than by litestar's `ServerSentEvent`, whose iterator wraps
    the stream in one more generator and writes each message through a `StringIO` and a
    line-break regex: every token of every stream passes here on the event loop, which
    at 128 streams on a fast GPU is busy for a third to a half of each batch step."""
    body = stream_body(request, frames, error_tail, cleanup, sse_bytes)
    return Streamed(body, media_type="text/event-stream", headers=SSE_HEADERS)


def sse_bytes(frame: str | ServerSentEventMessage) -> bytes:
    """One SSE message on the wire, as litestar's `ServerSentEventMessage.encode` writes
    it (CRLF line ends). Protocol frames are JSON, which holds no raw line break, and
    event names; anything else takes litestar's own encoder."""
    if isinstance(frame, str):
        if not _breaks(frame):
            return b"data: " + frame.encode() + b"\r\n\r\n"
        return ServerSentEventMessage(data=frame).encode()
    data, event = frame.data, frame.event
    plain = frame.id is None and frame.retry is None and frame.comment is None
    if plain and isinstance(data, str) and event and not _breaks(data) and not _breaks(event):
        return f"event: {event}\r\ndata: {data}\r\n\r\n".encode()
    return frame.encode()


def _breaks(text: str) -> bool:
    return "\n" in text or "\r" in text
