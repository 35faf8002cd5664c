"""The replicas of one upstream model: who is in rotation, who serves the next request.

All state lives on the engine's own event loop (one owner, no locks). Selection:
1. Only replicas in rotation count; a request may exclude those that already failed it.
2. Of those with a free slot (`max_in_flight`), the one with the fewest requests in flight
   serves; ties go to the one that was picked longest ago.
3. When every replica in rotation is full, the request waits (in arrival order) for a slot.
4. When no replica is in rotation, the request fails at once (503, Retry-After: the time
   until the next probe).
A replica leaves rotation when a health check fails, or at once when a request could not
reach it, timed out, or was told 503; after three other failures in a row. It rests for
`cooldown`, then each health check probes it until one passes and it is back.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from urllib.parse import urlsplit

from engines.log import emit
from schemas.events import ReplicaDown, ReplicaUp

# Failures in a row (statuses other than 503) that take a replica out of rotation: one bad
# request must not take every replica out in turn.
SOFT_FAILURES = 3


def replica_name(url: str) -> str:
    """How events name a replica: its URL without any user:password part."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}".rstrip("/")


class Replica:
    """One server. `base` is the OpenAI base URL (paths such as /chat/completions hang off it)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        path = parts.path.rstrip("/") or "/v1"  # a bare host:port serves OpenAI under /v1
        self.base = f"{parts.scheme}://{parts.netloc}{path}"
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.name = replica_name(self.base)
        self.in_flight = 0
        self.up = False  # until its first health check passes
        self.checked = False  # its first health check has been reported
        self.down_until = 0.0  # monotonic time before which it is not probed
        self.failures = 0
        self.picked = 0  # the pick counter when it last served: fairness on ties
        self.health_path: str | None = None  # learnt on the first probe
        self.reason: str | None = None  # why it is out of rotation, while it is


class NoReplica(Exception):
    """Every replica is out of rotation, or has already failed this request."""


class ReplicaPool:
    def __init__(self, model_id: str, urls: list[str], max_in_flight: int, cooldown: float) -> None:
        self.model_id = model_id
        self.replicas = [Replica(url) for url in urls]
        self.max_in_flight = max_in_flight
        self.cooldown = cooldown
        self._picks = itertools.count(1)
        self._changed = asyncio.Condition()

    def retry_after(self) -> float:
        """Seconds until a replica out of rotation is next probed (at least one)."""
        waits = [r.down_until - time.monotonic() for r in self.replicas if not r.up]
        return max(1.0, min(waits, default=1.0))

    async def acquire(self, exclude: set[Replica]) -> Replica:
        """A slot on the least busy replica in rotation (see the module's selection order)."""
        async with self._changed:
            while True:
                live = [r for r in self.replicas if r.up and r not in exclude]
                if not live:
                    raise NoReplica()
                free = [r for r in live if r.in_flight < self.max_in_flight]
                if free:
                    chosen = min(free, key=lambda r: (r.in_flight, r.picked))
                    chosen.in_flight += 1
                    chosen.picked = next(self._picks)
                    return chosen
                await self._changed.wait()

    async def release(self, replica: Replica) -> None:
        replica.in_flight -= 1
        await self._notify()

    def succeeded(self, replica: Replica) -> None:
        replica.failures = 0

    async def failed(self, replica: Replica, reason: str, *, hard: bool) -> None:
        """A request failed on `replica`: out of rotation at once when `hard`, else after
        `SOFT_FAILURES` in a row."""
        replica.failures += 1
        if replica.up and (hard or replica.failures >= SOFT_FAILURES):
            await self.mark_down(replica, reason)

    async def mark_down(self, replica: Replica, reason: str) -> None:
        replica.down_until = time.monotonic() + self.cooldown
        replica.reason = reason
        if replica.up or not replica.checked:
            replica.up, replica.checked = False, True
            down = ReplicaDown(model=self.model_id, replica=replica.name, reason=reason)
            emit(down, level="warning")
        await self._notify()

    async def mark_up(self, replica: Replica) -> None:
        replica.failures, replica.reason = 0, None
        if not replica.up:
            replica.up, replica.checked = True, True
            emit(ReplicaUp(model=self.model_id, replica=replica.name))
        await self._notify()

    def down(self, most: int = 8) -> str:
        """The replicas out of rotation and why, for an error (named without credentials)."""
        out = [r for r in self.replicas if not r.up]
        said = "; ".join(f"{r.name}: {r.reason or 'not checked yet'}" for r in out[:most])
        return said + (f"; and {len(out) - most} more" if len(out) > most else "")

    def due(self, replica: Replica) -> bool:
        """Whether a health check should probe `replica` now (in rotation, or rested)."""
        return replica.up or time.monotonic() >= replica.down_until

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
