"""The stand-in for a layer's SwitchGLU/SwitchMLP. The layer's resident experts live in stacks
of `capacity` slots, one per stacked tensor, which mlx-lm's own module (`shell`) runs over
with the router's indices mapped to slots: the same `gather_mm` (or `gather_qmm` for
quantized experts) as the whole model, over the resident stack itself (nothing is copied
while the step's experts are resident).

When every expert fits, the stacks hold them in expert order and the router's indices are
used as they are, on the device: no step waits on the host. Otherwise each step reads the
routing on the host (one sync a layer: which experts are missing can be known no other way),
reads the missing experts into the slots the policy frees, and maps the indices to slots."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from engines.mlx.experts.cache import Counts, ExpertCache
from engines.mlx.experts.files import ExpertReader, TensorRecord


class ExpertLayer:
    """One layer's experts: the original module emptied of its stacks (`shell`), the records
    of each stacked tensor (`leaves`: its path inside the module -> record), the cache and the
    resident stacks (`stacks`: path -> `[capacity, ...]`)."""

    def __init__(
        self,
        shell: nn.Module,
        leaves: dict[str, TensorRecord],
        reader: ExpertReader,
        capacity: int,
        policy: str,
        counts: Counts,
    ) -> None:
        self.shell = shell
        self.leaves = leaves
        self.reader = reader
        self.counts = counts
        self.experts = next(iter(leaves.values())).experts
        self.expert_bytes = sum(r.stride for r in leaves.values())
        self.cache = ExpertCache(capacity, policy)
        self.stacks: dict[str, mx.array] = {}  # laid out by `hold`, at load or the first step
        self.whole = False  # every expert resident, in expert order

    def hold(self, capacity: int) -> None:
        """Lay the resident stacks out for `capacity` experts: the kept ones first (least
        recent first), then the lowest others read from disk, so a model starts warm; every
        expert in its own order when all fit."""
        kept = self.cache.resize(capacity)
        capacity = self.cache.capacity
        if capacity >= self.experts:
            order = list(range(self.experts))
        else:
            others = [e for e in range(self.experts) if e not in set(kept)]
            order = kept + others[: capacity - len(kept)]
        fresh = [e for e in order if self.cache.slot(e) is None]
        read = dict(zip(fresh, self._read_many(fresh), strict=True)) if fresh else {}
        stacks = {}
        for path in self.leaves:
            parts = [
                read[e][path] if e in read else self.stacks[path][self.cache.slot(e)] for e in order
            ]
            stacks[path] = mx.stack(parts)
            mx.eval(stacks[path])  # one tensor at a time: the parts are freed as it goes
        self.stacks = stacks
        self.cache.fill(order)
        self.whole = len(order) == self.experts
        self._set(self.stacks)

    def _read_many(self, experts: list[int]) -> list[dict[str, mx.array]]:
        """Experts read from disk: every (expert, tensor) at once on the reader's threads
        (pread lets the others run meanwhile), made arrays here."""
        jobs = [(e, path, record) for e in experts for path, record in self.leaves.items()]
        raws = self.reader.read_all([(record, e) for e, _, record in jobs])
        read: list[dict[str, mx.array]] = [{} for _ in experts]
        where = {e: i for i, e in enumerate(experts)}
        for (expert, path, record), raw in zip(jobs, raws, strict=True):
            read[where[expert]][path] = self.reader.array(record, raw)
        mx.eval([a for tensors in read for a in tensors.values()])
        self.counts.bytes_read += self.expert_bytes * len(experts)
        return read

    def _set(self, stacks: dict[str, mx.array]) -> None:
        for path, value in stacks.items():
            owner_path, _, leaf = path.rpartition(".")
            owner = self.shell
            for part in owner_path.split(".") if owner_path else ():
                owner = owner[part] if isinstance(owner, dict) else getattr(owner, part)
            owner[leaf] = value

    def __call__(self, x: mx.array, indices: mx.array) -> mx.array:
        if not self.stacks:
            self.hold(self.cache.capacity)
        if self.whole:
            self.counts.hits += indices.size  # every routed expert is resident
            return self.shell(x, indices)
        routed = np.array(indices)  # evaluates the router: which experts this step needs
        needed, uses = np.unique(routed, return_counts=True)
        wanted = needed.tolist()
        missing = [e for e in wanted if self.cache.slot(e) is None]
        slots = self.cache.place(wanted, uses.tolist(), self.counts)
        placed = list(zip(wanted, slots, strict=True))
        read = {}
        if missing:
            try:
                read = dict(zip(missing, self._read_many(missing), strict=True))
            except BaseException:
                self.cache.forget(missing)
                raise
            into = [(slot, read[e]) for e, slot in placed if e in read and slot is not None]
            if into:
                at = mx.array([slot for slot, _ in into])
                for path, stack in self.stacks.items():
                    # In place: mlx writes into the stack's own buffer when nothing else holds it.
                    stack[at] = mx.stack([tensors[path] for _, tensors in into])
        position = np.zeros(self.experts, dtype=np.uint32)
        if all(slot is not None for slot in slots):
            position[needed] = slots
            return self.shell(x, mx.array(position[routed]))
        # More experts routed than fit (a long prefill): this step runs on a stack of its own.
        step = {
            path: mx.stack(
                [stack[slot] if slot is not None else read[e][path] for e, slot in placed]
            )
            for path, stack in self.stacks.items()
        }
        position[needed] = np.arange(len(needed), dtype=np.uint32)
        self._set(step)
        try:
            return self.shell(x, mx.array(position[routed]))
        finally:
            self._set(self.stacks)


class CachedExperts(nn.Module):
    """What replaces `switch_mlp` (or `experts`) in a MoE block: no parameters of its own (the
    resident experts are counted by the cache, not by `model.parameters()`)."""

    def __init__(self, layer: ExpertLayer) -> None:
        super().__init__()
        # A plain object, not a child module: its stacks are not the model's parameters.
        self._experts = layer

    def __call__(self, x: mx.array, indices: mx.array) -> mx.array:
        return self._experts(x, indices)
