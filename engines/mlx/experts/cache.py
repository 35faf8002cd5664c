"""The per-layer cache of resident experts: at most `capacity` experts of a layer held, the
one to drop chosen by the policy (`lru`: the least recently routed; `lfu`: the least often
routed since load, the least recent among equals). Knows nothing of mlx: an expert's value
is whatever the loader returns (its tensors)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

POLICIES = ("lru", "lfu")


@dataclass
class Counts:
    """Expert look-ups since load: routed experts found resident, read from disk, the
    bytes those reads took, and the resident experts dropped to make room."""

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
    """One layer's resident experts."""

    def __init__(
        self,
        capacity: int,
        policy: str,
        load: Callable[[int], object],
        load_many: Callable[[list[int]], list[object]] | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("an expert cache holds at least one expert")
        if policy not in POLICIES:
            raise ValueError(f"unknown expert policy {policy!r}")
        self.capacity = capacity
        self.policy = policy
        self._load = load
        # A step's missing experts read together (their reads may overlap); else one by one.
        self._load_many = load_many or (lambda experts: [self._load(e) for e in experts])
        self._held: OrderedDict[int, object] = OrderedDict()  # least recent first
        self._uses: dict[int, int] = {}

    @property
    def resident(self) -> list[int]:
        return list(self._held)

    def resize(self, capacity: int) -> None:
        """Hold at most `capacity` experts from now on, dropping by the policy."""
        self.capacity = max(1, capacity)
        while len(self._held) > self.capacity:
            self._held.pop(self._victim(set()))

    def fetch(self, experts: Iterable[int], counts: Counts) -> list[object]:
        """The values of `experts` (distinct), in their order: resident ones as held, the
        others loaded and kept, evicting by the policy but never one routed in this step. A
        step routing more experts than fit keeps the last ones it read; the rest are
        used for this step only."""
        wanted = list(experts)
        step = set(wanted)
        missing = [e for e in wanted if e not in self._held]
        read = dict(zip(missing, self._load_many(missing), strict=True)) if missing else {}
        values = []
        for expert in wanted:
            self._uses[expert] = self._uses.get(expert, 0) + 1
            if expert in read:
                counts.misses += 1
                value = read[expert]
                self._keep(expert, value, step, counts)
            else:
                counts.hits += 1
                value = self._held[expert]
                self._held.move_to_end(expert)
            values.append(value)
        return values

    def _keep(self, expert: int, value: object, step: set[int], counts: Counts) -> None:
        if len(self._held) >= self.capacity:
            victim = self._victim(step)
            if victim is None:
                return  # every resident expert is routed in this step
            del self._held[victim]
            counts.evictions += 1
        self._held[expert] = value

    def _victim(self, step: set[int]) -> int | None:
        candidates = [e for e in self._held if e not in step]
        if not candidates:
            return None
        if self.policy == "lru":
            return candidates[0]
        # lfu: the fewest uses; among equals the least recent (candidates are in recency order)
        return min(candidates, key=lambda e: self._uses.get(e, 0))
