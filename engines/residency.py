"""The memory budget: weights plus KV cache of every resident model, against one limit.

Before a model loads, the budget makes room by unloading the least recently used idle
model that is not pinned, and reserves the model's estimate at once, so that loads running
together never overcommit it. When the room is held by models that are busy but not
pinned, the load waits for them instead (swap-aware admission):
1. the waiting model is noted (`waiting_since`), and a `swap_waiting` event says for whom;
2. each busy holder goes on admitting from its own queue — a burst — until the waiter
   has waited `server.max_swap_wait` (counted from when the holder loaded, if later), and
   always admits at least one request per load, so swapping never starves a model;
3. then the holder admits no more, finishes what runs, and is evicted with its queue still
   waiting (it loads again when room comes back, by the same rules);
4. when even unloading every unpinned model could not make room, the load is refused with
   the numbers, and the request that asked for it gets a 503 saying why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from engines.errors import ModelUnavailable
from engines.log import emit
from engines.units import describe
from schemas.events import SwapWaiting

# `memory_budget: auto` leaves this share of the machine to the OS and everything else.
AUTO_SHARE = 0.75
# A CUDA device's memory is the models' alone (the OS lives in host RAM): keep a margin
# for MLX's own buffers and the CUDA context.
AUTO_SHARE_CUDA = 0.9


def auto_budget(memory_bytes: int, cuda: bool = False) -> int:
    """`memory_budget: auto`: a share of the memory models live in (the platform path's;
    the machine's RAM where that is unknown)."""
    from engines.platform import ram_bytes

    return int((memory_bytes or ram_bytes()) * (AUTO_SHARE_CUDA if cuda else AUTO_SHARE))


class Resident(Protocol):
    """What the budget sees of a model that holds memory (a runner): enough to pick the
    least recently used idle one and unload it."""

    @property
    def model_id(self) -> str: ...

    @property
    def evictable(self) -> bool:
        """Loaded, not pinned, and with nothing waiting, running or holding it."""
        ...

    @property
    def swappable(self) -> bool:
        """Holds memory it will let go of once it has served its burst (not pinned)."""
        ...

    @property
    def last_used(self) -> float:
        """`time.monotonic()` of its last use."""
        ...

    async def unload(self, reason: str) -> bool:
        """Unload now if idle; False when it was not."""
        ...

    def wake(self) -> None:
        """No one waits for its memory any more: admit from its queue again."""
        ...


class MemoryBudget:
    """Who holds how much, and who waits for room. Lives as long as the process, across
    config generations."""

    # How often a load waiting for room looks again, should no change be signalled.
    RECHECK_S = 0.5

    def __init__(self, total: int, swap_wait: Callable[[], float] = lambda: 0.0) -> None:
        """`swap_wait` gives `server.max_swap_wait` in seconds, as configured now."""
        self.total = total
        self._swap_wait = swap_wait
        self._held: dict[Resident, int] = {}
        self._waiting: dict[Resident, float] = {}  # who waits for room, since when
        self._changes: list[asyncio.Future[None]] = []

    @property
    def used(self) -> int:
        return sum(self._held.values())

    def hold(self, resident: Resident, size: int) -> None:
        self._held[resident] = size

    def release(self, resident: Resident) -> None:
        self._held.pop(resident, None)

    def changed(self) -> None:
        """A resident's work ended or it stopped admitting: loads waiting for room look again."""
        for change in self._changes:
            if not change.done():
                change.set_result(None)
        self._changes.clear()

    def yield_due(self, holder: Resident, loaded_at: float) -> bool:
        """Step 2: whether `holder`'s burst is over — another model has waited for room
        `server.max_swap_wait`, counted from `loaded_at` if that is later."""
        others = [since for r, since in self._waiting.items() if r is not holder]
        if not others:
            return False
        return time.monotonic() >= max(min(others), loaded_at) + self._swap_wait()

    def could_fit(self, needed: int, *, beside: Resident) -> bool:
        """Whether `needed` bytes fit while `beside` stays resident (idle unpinned models may
        be unloaded to make room, as a load would)."""
        freeable = sum(s for r, s in self._held.items() if r is not beside and r.evictable)
        return self.total - self.used + freeable >= needed

    async def make_room(self, resident: Resident, needed: int) -> int:
        """Unload idle unpinned models, least recently used first, until `needed` fits,
        waiting for busy unpinned ones to finish their burst (the steps above); then
        reserve `needed` for `resident` (its load replaces it with what it really holds
        through `hold`, or frees it through `release`).

        Returns the bytes then left for `resident`; raises `ModelUnavailable` (503) naming
        the numbers when even unloading every unpinned model cannot make `needed` fit.
        """
        self.release(resident)
        try:
            while self.total - self.used < needed:
                others = [r for r in self._held if r is not resident]
                candidates = [r for r in others if r.evictable]
                if candidates:
                    victim = min(candidates, key=lambda r: r.last_used)
                    await victim.unload("evicted")
                    continue
                holders = [r for r in others if r.swappable]
                if self.total - self.used + sum(self._held[r] for r in holders) < needed:
                    raise self._no_room(resident, needed)
                if resident not in self._waiting:  # step 1
                    self._waiting[resident] = time.monotonic()
                    emit(
                        SwapWaiting(model=resident.model_id, holders=[h.model_id for h in holders])
                    )
                change = asyncio.get_running_loop().create_future()
                self._changes.append(change)
                await asyncio.wait([change], timeout=self.RECHECK_S)
                if not change.done():  # looked again on time, not on a change: forget it
                    self._changes.remove(change)
        finally:
            if self._waiting.pop(resident, None) is not None:
                for holder in list(self._held):
                    holder.wake()  # a burst cut short for this waiter may go on
        left = self.total - self.used
        self._held[resident] = needed  # no await since the check: nobody else took it
        return left

    def _no_room(self, resident: Resident, needed: int) -> ModelUnavailable:
        held = ", ".join(f"{r.model_id} ({describe(s)})" for r, s in self._held.items())
        return ModelUnavailable(
            f"model {resident.model_id!r} needs about {describe(needed)} but the memory "
            f"budget ({describe(self.total)}) has {describe(self.total - self.used)} "
            f"left and nothing idle can be unloaded; resident: {held or 'none'}"
        )
