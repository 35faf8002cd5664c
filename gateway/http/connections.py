"""Connections: how many the gateway holds, how long one may take to send its request, and
the open-file limit they all draw on.

Every connection is a file descriptor. Past the process's limit `accept()` fails, asyncio
retries it in a loop writing a traceback each time, and nobody is served — `/health`
included. So at start the soft limit is raised to the hard one (and kept there: mlx-lm's
import would lower it to 2,048, or fail outright where the hard limit is under 4,096); the
gateway holds at most `limits.max_connections` (by default the limit less a reserve for
model files and logs) and answers any connection past that with a 503 at once; and a
connection that does not finish its request head within `limits.header_timeout` gets a 408
and is closed, so idle and slowloris connections cannot hold the slots.
"""

from __future__ import annotations

import asyncio
import resource

from gateway.http.errors import raw_error
from gateway.http.limits import HeaderLimitProtocol
from gateway.http.protocols import Envelope

# The listen backlog; asyncio accepts up to this many connections in one go before the
# over-limit ones among them are closed, so the cap leaves room for a whole burst.
BACKLOG = 256
# Kept free beside the connections: model files, safetensors shards, the log file, the
# watcher, pipes — and one burst of accepts.
RESERVED_FDS = 256 + BACKLOG


def raise_fd_limit() -> int:
    """Raise the soft open-file limit as far as the hard one allows; the limit in force.

    Never fails: where the hard limit is low (or the system refuses), the soft one stays.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # An "unlimited" hard limit is not a number the kernel takes for open files.
    for target in (hard, 1 << 20, 10240) if hard == resource.RLIM_INFINITY else (hard,):
        if target <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def hold_fd_limit() -> None:
    """Keep the open-file limit set at start: later NOFILE changes are ignored.

    `mlx_lm.utils` calls `setrlimit(RLIMIT_NOFILE, (2048, 4096))` when imported — lowering
    a raised limit (and the hard one for good), or raising ValueError and failing the
    import where the hard limit is below 4,096. It is imported lazily, on whichever thread
    first loads a model, so the call is neutralized for the process instead.
    """
    original = resource.setrlimit

    def setrlimit(which: int, limits: tuple[int, int]) -> None:
        if which != resource.RLIMIT_NOFILE:
            original(which, limits)

    resource.setrlimit = setrlimit


def connection_cap(configured: int | None, fd_limit: int) -> int:
    """The connections held at once: as configured, and always below the open-file limit."""
    ceiling = max(16, fd_limit - RESERVED_FDS)
    return min(configured, ceiling) if configured else ceiling


def make_protocol(
    max_connections: int, header_timeout: float, max_header_bytes: int, envelope: Envelope
) -> type[HeaderLimitProtocol]:
    """uvicorn's httptools protocol (with the 431 of `HeaderLimitProtocol`), capped and
    timed; its refusals in `envelope` (the default protocol's: no route has said which
    protocol the client speaks)."""
    full = raw_error(
        "503 Service Unavailable",
        f"the gateway holds {max_connections} connections already (limits.max_connections); "
        "retry shortly",
        envelope,
        retry=True,
    )
    slow = raw_error(
        "408 Request Timeout",
        f"the request head did not arrive within {header_timeout:g}s (limits.header_timeout)",
        envelope,
        retry=True,
    )

    class GatewayHttp(HeaderLimitProtocol):
        max_head = max_header_bytes
        refusal = staticmethod(envelope)
        _head_timer: asyncio.TimerHandle | None = None
        _waiting_cycle: object = None  # the cycle before the head we are waiting for

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                # Answered and closed at once: the descriptor comes back, nothing waits.
                transport.write(full)
                transport.close()
                return
            self._await_head()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._head_timer is not None and self.cycle is not self._waiting_cycle:
                self._head_timer.cancel()  # a new request's head arrived whole
                self._head_timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._await_head()  # the next request on this connection gets as long

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def _await_head(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._waiting_cycle = self.cycle
            self._head_timer = self.loop.call_later(header_timeout, self._head_too_slow)

        def _head_too_slow(self) -> None:
            self._head_timer = None
            in_flight = self.cycle is not None and not self.cycle.response_complete
            if not self.transport.is_closing() and not in_flight:
                self.transport.write(slow)
                self.transport.close()

    return GatewayHttp
