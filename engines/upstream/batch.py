"""The runner's batch for an upstream model: requests stream on the engine's loop, and each
`step()` hands the runner's thread the next output of every request that has one.

Handing on one output per request per step keeps a step what it is for a local model
(about one token of every active request), so `rate.max_tokens_per_sec` paces it alike.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
from collections import deque
from collections.abc import Callable, Hashable

from engines.batch import Step
from engines.errors import GatewayError, UpstreamError
from engines.upstream.client import Upstream
from engines.upstream.loop import LoopThread
from schemas.canonical import ChatRequest, Finished, Output

CANCEL_POLL_S = 0.05  # how often a streaming request looks whether its client has gone
# A request stopped because its client left; the replica's counts never came.
CANCELLED = Finished(
    stop_reason="cancelled", prompt_tokens=0, new_tokens=0, prefill_s=0, decode_s=0
)


class UpstreamBatch:
    def __init__(self, loop: LoopThread, upstream: Upstream) -> None:
        self._loop = loop
        self._upstream = upstream
        # (key, output) from the engine's loop; None only wakes a waiting step().
        self._arrived: queue.SimpleQueue[tuple[Hashable, Output | Exception] | None] = (
            queue.SimpleQueue()
        )
        self._pending: dict[Hashable, deque[Output | Exception]] = {}

    @property
    def active(self) -> int:
        return len(self._pending)

    def add(self, key: Hashable, request: ChatRequest, cancelled: Callable[[], bool]) -> None:
        self._pending[key] = deque()

        def put(item: Output | Exception) -> None:
            self._arrived.put((key, item))

        # In the caller's context (the request's log context): its events carry its id.
        work = _stream_into(self._upstream, request, cancelled, put)
        self._loop.spawn(work, context=contextvars.copy_context())

    def wake(self) -> None:
        self._arrived.put(None)

    def step(self) -> list[Step]:
        if not any(self._pending.values()):
            self._take(self._arrived.get())  # block until something arrives (or a wake)
        while True:
            try:
                self._take(self._arrived.get_nowait())
            except queue.Empty:
                break
        out: list[Step] = []
        for key, waiting in list(self._pending.items()):
            if not waiting:
                continue
            output = waiting.popleft()
            out.append((key, output))
            if isinstance(output, Finished | Exception):
                del self._pending[key]
        return out

    def _take(self, item: tuple[Hashable, Output | Exception] | None) -> None:
        if item is not None and item[0] in self._pending:
            self._pending[item[0]].append(item[1])


async def _stream_into(
    upstream: Upstream,
    request: ChatRequest,
    cancelled: Callable[[], bool],
    put: Callable[[Output | Exception], None],
) -> None:
    """Stream one request, posting every output; always ends with a Finished or an error."""
    streaming = asyncio.ensure_future(_forward(upstream, request, put))
    while not streaming.done():
        await asyncio.wait({streaming}, timeout=CANCEL_POLL_S)
        if cancelled() and not streaming.done():
            # Closing the stream closes the connection: the replica stops generating too.
            streaming.cancel()
            await asyncio.gather(streaming, return_exceptions=True)
            put(CANCELLED)
            return


async def _forward(
    upstream: Upstream, request: ChatRequest, put: Callable[[Output | Exception], None]
) -> None:
    try:
        async for output in upstream.stream(request):
            put(output)
    except asyncio.CancelledError:
        raise
    except GatewayError as error:
        put(error)
    except Exception as error:  # a bug here is this request's failure, said plainly
        put(UpstreamError(f"model {upstream.model_id!r}: upstream request failed: {error!r}"))
