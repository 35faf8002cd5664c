"""Whether the disk tier pays on this machine: a model's prefill and disk rates (`Worth`).

Saving and loading blocks happen only where the disk is sooner than the prefill it
replaces, as this model's own rates on this machine say; `rates.py` keeps them across
restarts beside the blocks.
"""

from __future__ import annotations

from engines.mlx.cache.blocks import BLOCK_TOKENS


class Worth:
    """Whether reading a prefix back beats prefilling it again, from this model's own rates
    on this machine: the tokens/s of its prefills and the bytes/s its blocks move to and from
    disk. A slow prefill (a CPU, Apple Silicon) makes the disk worth it by far; an H200
    prefills an 8B model at ~12k tokens/s, as fast as its disk gave 4 GiB of KV back, and
    there neither the save (a copy out of GPU memory on the model's thread) nor the read pays.
    Until both rates are seen, the disk is used: that is how they get measured."""

    def __init__(self) -> None:
        self.prefill_tps: float | None = None
        self.disk_bps: float | None = None

    def prefilled(self, tokens: int, seconds: float) -> None:
        if tokens >= BLOCK_TOKENS and seconds > 0:
            self.prefill_tps = _recent(self.prefill_tps, tokens / seconds)

    def moved(self, nbytes: int, seconds: float) -> None:
        if nbytes > 0 and seconds > 0:
            self.disk_bps = _recent(self.disk_bps, nbytes / seconds)

    def disk_pays(self, tokens: int, nbytes: int | None) -> bool:
        """Whether `nbytes` of blocks come off disk sooner than `tokens` prefill."""
        if self.prefill_tps is None or self.disk_bps is None or nbytes is None:
            return True
        return nbytes / self.disk_bps < tokens / self.prefill_tps


def _recent(mean: float | None, value: float) -> float:
    """A running mean that follows the machine as it is now (the last few samples)."""
    return value if mean is None else 0.7 * mean + 0.3 * value
