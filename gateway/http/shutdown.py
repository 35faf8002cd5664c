"""Graceful shutdown: on SIGTERM stop admitting, let what runs finish, then exit 0.

uvicorn's own SIGTERM handling closes the listening socket at once, so a client arriving
during the drain would see a refused connection and could not tell "going away" from
"down". Here the socket stays open through the drain: new requests get a 503 in their
protocol's envelope (with `Connection: close`), `/health` says `draining` (so a load
balancer moves traffic away), and the requests already admitted run to their end — up to
`server.shutdown_grace`. Only then does uvicorn close the socket and run the lifespan's
shutdown, which unloads every model (`model_detached` reason `shutdown`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import FrameType

import uvicorn
from litestar.types import ASGIApp, Receive, Scope, Send

from engines.log import emit
from engines.tasks import Tasks
from gateway.http.middleware import send_error
from gateway.logs.setup import LogScope
from schemas.config import seconds
from schemas.events import ServerDraining, ServerStopping

# Paths a drain neither refuses nor waits for: health answers "draining" itself, and the
# ops page's event feed is ended by the drain rather than waited on.
UNCOUNTED = ("/health", "/ui/events")


class Admission:
    """Counts the requests in flight and, once draining, turns new ones away."""

    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self.on_drain: list[Callable[[], None]] = []  # called once when the drain begins
        self._idle = asyncio.Event()
        self._idle.set()

    def begin_drain(self) -> None:
        self.draining = True
        for callback in self.on_drain:
            callback()

    async def wait_idle(self, timeout: float) -> bool:
        """True once nothing is in flight; False when `timeout` seconds pass first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except TimeoutError:
            return False

    def middleware(self, app: ASGIApp) -> ASGIApp:
        """ASGI middleware: count each request while it runs; 503 for new ones once draining."""

        async def admission(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["path"] in UNCOUNTED:
                await app(scope, receive, send)
                return
            if self.draining:
                message = "the gateway is shutting down and admits no new requests; retry"
                headers = [(b"retry-after", b"5"), (b"connection", b"close")]
                await send_error(scope, send, 503, message, headers)
                return
            self.in_flight += 1
            self._idle.clear()
            try:
                await app(scope, receive, send)
            finally:
                self.in_flight -= 1
                if not self.in_flight:
                    self._idle.set()

        return admission


class DrainingServer(uvicorn.Server):
    """uvicorn, with SIGTERM/SIGINT starting a drain instead of closing the socket at once.

    A second signal forces the exit. The signal is not re-raised after the drain (uvicorn
    does that by default), so a drained gateway exits 0.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        admission: Admission,
        grace: Callable[[], str],
        log_scope: LogScope | None = None,
    ):
        super().__init__(config)
        self._admission = admission
        self._log_scope = log_scope  # the app's: the drain's events go to its listeners
        self._grace = grace  # read when the signal comes: a reload may have changed it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks = Tasks()

    async def serve(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._admission.draining:  # a second signal: stop now
            self.force_exit = self.should_exit = True
            return
        if self._loop is None:  # not serving yet: nothing to drain
            self.should_exit = True
            return
        self._admission.draining = True  # from this instant, new requests get 503
        self._loop.call_soon_threadsafe(lambda: self._tasks.spawn(self._drain(sig), "drain"))

    async def _drain(self, sig: int) -> None:
        if self._log_scope is not None:  # started from a signal, outside the app's context
            self._log_scope.enter()
        grace = self._grace()
        emit(
            ServerDraining(signal=sig, in_flight=self._admission.in_flight, grace_s=seconds(grace))
        )
        self._admission.begin_drain()
        started = time.perf_counter()
        finished = await self._admission.wait_idle(seconds(grace))
        emit(
            ServerStopping(
                drained=finished,
                left_in_flight=self._admission.in_flight,
                drain_s=round(time.perf_counter() - started, 3),
            )
        )
        self.should_exit = True
