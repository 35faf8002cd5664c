"""The per-layer cache of resident experts: at most `capacity` experts of a layer held, each in
a slot of the layer's resident stacks, the one to drop chosen by the policy (`lru`: the least
recently routed; `lfu`: the least often routed since load, the least recent among equals).
Knows nothing of mlx: it says which slot holds which expert and which experts a step must read.

A look-up is one routed (token, expert) pair: the hit rate is the share of the routed uses
served from memory."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

POLICIES = ("lru", "lfu")


@dataclass
class Counts:
    """Expert look-ups since load: routed (token, expert) pairs found resident and not, the
    bytes the reads took, and the resident experts dropped to make room."""

    hits: int = 0
    misses: int = 0
    bytes_read: int = 0
    evictions: int = 0

    def since(self, before: Counts) -> Counts:
        return Counts(
            self.hits - before.hits,
            self.misses - before.misses,
            self.bytes_read - before.bytes_read,
            self.evictions - before.evictions,
        )

    def copy(self) -> Counts:
        return Counts(self.hits, self.misses, self.bytes_read, self.evictions)

    @property
    def hit_rate(self) -> float | None:
        total = self.hits + self.misses
        return self.hits / total if total else None


class ExpertCache:
    """One layer's resident experts and the slot each one is in."""

    def __init__(self, capacity: int, policy: str) -> None:
        if capacity < 1:
            raise ValueError("an expert cache holds at least one expert")
        if policy not in POLICIES:
            raise ValueError(f"unknown expert policy {policy!r}")
        self.capacity = capacity
        self.policy = policy
        self._held: OrderedDict[int, int] = OrderedDict()  # expert -> slot, least recent first
        self._free: list[int] = list(range(capacity))
        self._uses: dict[int, int] = {}

    @property
    def resident(self) -> list[int]:
        return list(self._held)

    def slot(self, expert: int) -> int | None:
        return self._held.get(expert)

    def resize(self, capacity: int) -> list[int]:
        """Hold at most `capacity` experts from now on, dropping by the policy; the experts
        kept, least recent first (the caller lays them out again and calls `fill`)."""
        self.capacity = max(1, capacity)
        while len(self._held) > self.capacity:
            self._held.pop(self._victim(set()))
        return list(self._held)

    def fill(self, experts: list[int]) -> None:
        """The slots laid out anew: `experts[i]` in slot i (least recent first), the rest free."""
        self._held = OrderedDict((expert, slot) for slot, expert in enumerate(experts))
        self._free = list(range(len(experts), self.capacity))

    def place(self, experts: list[int], uses: list[int], counts: Counts) -> list[int | None]:
        """A step's distinct `experts` (routed `uses[i]` times each): the slot of each, the
        missing ones given a free slot or an evicted expert's, never one routed in this step.
        A missing expert with no slot to take (the step routes more than fit) is None: used
        for this step only. The missing ones are those `slot()` did not hold before."""
        step = set(experts)
        slots: list[int | None] = []
        for expert, used in zip(experts, uses, strict=True):
            self._uses[expert] = self._uses.get(expert, 0) + 1
            slot = self._held.get(expert)
            if slot is not None:
                counts.hits += used
                self._held.move_to_end(expert)
            else:
                counts.misses += used
                slot = self._take_slot(step, counts)
                if slot is not None:
                    self._held[expert] = slot
            slots.append(slot)
        return slots

    def forget(self, experts: list[int]) -> None:
        """Experts whose read failed: their slots hold nothing usable."""
        for expert in experts:
            slot = self._held.pop(expert, None)
            if slot is not None:
                self._free.append(slot)

    def _take_slot(self, step: set[int], counts: Counts) -> int | None:
        if self._free:
            return self._free.pop(0)
        victim = self._victim(step)
        if victim is None:
            return None  # every resident expert is routed in this step
        counts.evictions += 1
        return self._held.pop(victim)

    def _victim(self, step: set[int]) -> int | None:
        candidates = [e for e in self._held if e not in step]
        if not candidates:
            return None
        if self.policy == "lru":
            return candidates[0]
        # lfu: the fewest uses; among equals the least recent (candidates are in recency order)
        return min(candidates, key=lambda e: self._uses.get(e, 0))
