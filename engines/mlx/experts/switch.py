"""The stand-in for a layer's SwitchGLU/SwitchMLP: the router's indices are read on the host,
the routed experts fetched from the layer's cache (the missing ones read from disk), stacked,
and the original module run over that stack with the indices remapped into it. The matmuls
are mlx-lm's own (`gather_mm`, or `gather_qmm` for quantized experts): the module runs
unchanged, only its expert stacks are the routed experts'."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from engines.mlx.experts.cache import Counts, ExpertCache
from engines.mlx.experts.files import ExpertReader, TensorRecord


class ExpertLayer:
    """One layer's experts: the original module emptied of its stacks (`shell`), the records
    of each stacked tensor (`leaves`: its path inside the module -> record), the cache."""

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
        self.cache = ExpertCache(capacity, policy, self._read, self._read_many)

    def _read(self, expert: int) -> dict[str, mx.array]:
        return self._read_many([expert])[0]

    def _read_many(self, experts: list[int]) -> list[dict[str, mx.array]]:
        """A step's missing experts: every (expert, tensor) read at once on the reader's
        threads (pread lets the others run meanwhile), made arrays here."""
        jobs = [(e, path, record) for e in experts for path, record in self.leaves.items()]
        raws = self.reader.read_all([(record, e) for e, _, record in jobs])
        read: list[dict[str, mx.array]] = [{} for _ in experts]
        where = {e: i for i, e in enumerate(experts)}
        for (expert, path, record), raw in zip(jobs, raws, strict=True):
            read[where[expert]][path] = self.reader.array(record, raw)
        mx.eval([a for tensors in read for a in tensors.values()])
        self.counts.bytes_read += self.expert_bytes * len(experts)
        return read

    def _set(self, stacks: dict[str, mx.array | None]) -> None:
        for path, value in stacks.items():
            owner_path, _, leaf = path.rpartition(".")
            owner = self.shell
            for part in owner_path.split(".") if owner_path else ():
                owner = owner[part] if isinstance(owner, dict) else getattr(owner, part)
            owner[leaf] = value

    def __call__(self, x: mx.array, indices: mx.array) -> mx.array:
        routed = np.array(indices)  # evaluates the router: which experts this step needs
        needed = np.unique(routed)
        values = self.cache.fetch(needed.tolist(), self.counts)
        stacks = {path: mx.stack([v[path] for v in values]) for path in self.leaves}
        position = np.zeros(self.experts, dtype=np.uint32)
        position[needed] = np.arange(len(needed), dtype=np.uint32)
        local = mx.array(position[routed])
        self._set(stacks)
        try:
            return self.shell(x, local)
        finally:
            # The step's graph holds the stacks it needs; the shell keeps none between steps.
            self._set(dict.fromkeys(self.leaves))


class CachedExperts(nn.Module):
    """What replaces `switch_mlp` (or `experts`) in a MoE block: no parameters of its own (the
    resident experts are counted by the cache, not by `model.parameters()`)."""

    def __init__(self, layer: ExpertLayer) -> None:
        super().__init__()
        # A plain object, not a child module: its stacks are not the model's parameters.
        self._experts = layer

    def __call__(self, x: mx.array, indices: mx.array) -> mx.array:
        return self._experts(x, indices)
