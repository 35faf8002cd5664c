"""The memory budget: weights plus KV cache of every resident model, against one limit.

Before a model loads, the budget makes room by unloading the least recently used idle
model that is not pinned, and reserves the model's estimate at once, so that loads running
together never overcommit it; when nothing more can be freed the load is refused with the
numbers, and the request that asked for it gets a 503 saying why.
"""

from __future__ import annotations

from typing import Protocol

from engines.errors import ModelUnavailable

GiB = 2**30
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
    def last_used(self) -> float:
        """`time.monotonic()` of its last use."""
        ...

    async def unload(self, reason: str) -> bool:
        """Unload now if idle; False when it was not."""
        ...


def describe(size: int) -> str:
    return f"{size / GiB:.2f} GiB"


class MemoryBudget:
    """Who holds how much. Lives as long as the process, across config generations."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._held: dict[Resident, int] = {}

    @property
    def used(self) -> int:
        return sum(self._held.values())

    def hold(self, resident: Resident, size: int) -> None:
        self._held[resident] = size

    def release(self, resident: Resident) -> None:
        self._held.pop(resident, None)

    def could_fit(self, needed: int, *, beside: Resident) -> bool:
        """Whether `needed` bytes fit while `beside` stays resident (idle unpinned models may
        be unloaded to make room, as a load would)."""
        freeable = sum(s for r, s in self._held.items() if r is not beside and r.evictable)
        return self.total - self.used + freeable >= needed

    async def make_room(self, resident: Resident, needed: int) -> int:
        """Unload idle unpinned models, least recently used first, until `needed` fits,
        and reserve `needed` for `resident` (its load replaces it with what it really holds
        through `hold`, or frees it through `release`).

        Returns the bytes then left for `resident`; raises `ModelUnavailable` (503) naming
        the numbers when even unloading every candidate cannot make `needed` fit.
        """
        self.release(resident)
        while self.total - self.used < needed:
            candidates = [r for r in self._held if r is not resident and r.evictable]
            if not candidates:
                held = ", ".join(f"{r.model_id} ({describe(s)})" for r, s in self._held.items())
                raise ModelUnavailable(
                    f"model {resident.model_id!r} needs about {describe(needed)} but the memory "
                    f"budget ({describe(self.total)}) has {describe(self.total - self.used)} "
                    f"left and nothing idle can be unloaded; resident: {held or 'none'}"
                )
            victim = min(candidates, key=lambda r: r.last_used)
            await victim.unload("evicted")
        left = self.total - self.used
        self._held[resident] = needed  # no await since the check: nobody else took it
        return left
