"""The disk tier of an mlx-lm model's KV cache: blocks of `BLOCK_TOKENS` tokens per file.

Block i of a prompt holds every layer's keys and values for tokens [i·B, (i+1)·B); its key
hashes the key of block i-1 with its own tokens, so a key names the whole prefix up to it
and any shared prefix finds its blocks; the first key is salted with what the cache means
(`salt.py`). A block's arrays, in MLX and on the host, are `blocks.py`'s.

Saving copies the blocks not yet on disk out of MLX on the model's thread (a memory copy);
the store's thread writes them. Loading reads and checks files on the model's thread,
where the cache is needed. Both happen only where the disk is sooner than the prefill it
replaces, as this model's own rates on this machine say (`Worth`, worth.py), kept across
restarts beside the blocks (rates.py).
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from engines.cache import CacheDir
from engines.cache.blockfile import Layout
from engines.cache.store import BlockStore
from engines.mlx.cache.blocks import BLOCK_TOKENS, block_bytes, block_of, cache_of, to_host_all
from engines.mlx.cache.rates import rates_path, read_rates, write_rates
from engines.mlx.cache.salt import salt_of
from engines.mlx.cache.worth import Worth

# The shortest conversation saved. On CUDA a prefill of a couple of thousand tokens takes
# a fraction of a second, while saving copies the cache out of GPU memory on the model's
# thread, between the batch's steps: only long prompts are worth it there (not measured
# yet: bench/disk_cache.py --source on the H200 is the way to tune it).
MIN_TOKENS_CUDA = 2048


class DiskHit(NamedTuple):
    """What a lookup found on disk: the cache, the tokens it covers, the seconds it took."""

    cache: list
    tokens: int
    seconds: float


def why_off(config, where: CacheDir | None) -> str | None:
    """Why a model's config keeps it off the disk tier (its `disk_cache` detail), or None."""
    if where is None:
        return "off (server.cache)"
    if not config.disk_cache:
        return "off (disk_cache)"
    if not config.prefix_reuse:
        return "off (prefix_reuse)"
    return None


def cacheable(model) -> bool:
    """Whether every layer's cache is a plain `KVCache` (what a block can hold): rotating
    windows and state-space layers are not split into blocks."""
    from mlx_lm.models.cache import KVCache, make_prompt_cache

    return all(type(c) is KVCache for c in make_prompt_cache(model))


def min_tokens(device: str) -> int:
    """The shortest conversation saved on this platform (`PlatformPath.device`)."""
    return MIN_TOKENS_CUDA if device == "gpu (cuda)" else BLOCK_TOKENS


class DiskKV:
    """One model's KV blocks on disk: find and load a prompt's prefix, save a conversation."""

    def __init__(
        self,
        store: BlockStore,
        salt: bytes,
        shortest: int = BLOCK_TOKENS,
        worth: Worth | None = None,
        model: str = "",
        quantized: tuple[int, int] | None = None,
    ) -> None:
        self.store = store
        self._quantized = quantized  # (group size, bits) when blocks hold a QuantizedKVCache
        self._salt = salt
        self._shortest = shortest  # conversations shorter are not saved (`min_tokens`)
        self.worth = worth or Worth()
        self._block_bytes: int | None = None  # one block's bytes, once a block was seen
        # The rates this model measured here before (engines/mlx/cache/rates.py).
        self._model = model
        self._rates = rates_path(store.root, salt)
        if (rates := read_rates(self._rates, model)) is not None:
            self.worth.prefill_tps, self.worth.disk_bps = rates["prefill_tps"], rates["disk_bps"]
            self._block_bytes = int(rates["block_bytes"])

    @classmethod
    def open(
        cls,
        where: CacheDir,
        model_id: str,
        path: Path,
        meaning: str,
        shortest: int = BLOCK_TOKENS,
        quantized: tuple[int, int] | None = None,
        *,
        layout: Layout,
    ) -> DiskKV:
        """`meaning`: how the cache is computed beyond the files (dtype, kv_bits, device);
        `quantized`: (group size, bits) of a `QuantizedKVCache`'s blocks, None for `KVCache`;
        `layout`: what each block of this model holds (`model_layout`), the only blocks read."""
        worth = Worth()
        store = BlockStore(where, model_id, worth.moved, layout=layout)
        return cls(store, salt_of(path, meaning), shortest, worth, model_id, quantized)

    def close(self) -> None:
        """Finish the writes, then keep the rates for this model's next load."""
        self.store.close()
        worth = self.worth
        if worth.prefill_tps and worth.disk_bps and self._block_bytes:
            rates = {"prefill_tps": worth.prefill_tps, "disk_bps": worth.disk_bps}
            write_rates(self._rates, self._model, rates | {"block_bytes": self._block_bytes})

    def keys(self, tokens: list[int], blocks: int) -> list[str]:
        """The chained keys of the first `blocks` blocks of `tokens`."""
        keys, previous = [], self._salt
        for i in range(blocks):
            chunk = np.asarray(tokens[i * BLOCK_TOKENS : (i + 1) * BLOCK_TOKENS], np.uint32)
            previous = hashlib.blake2b(previous + chunk.tobytes(), digest_size=20).digest()
            keys.append(previous.hex())
        return keys

    def find(self, prompt: list[int], longer_than: int) -> DiskHit | None:
        """The longest prefix of `prompt` on disk, loaded, if it is longer than `longer_than`
        tokens; one token at least is left for the model to read."""
        keys = self.keys(prompt, (len(prompt) - 1) // BLOCK_TOKENS)
        keys = keys[: self.store.present(keys)]
        if len(keys) * BLOCK_TOKENS <= longer_than:
            return None
        gained = len(keys) * BLOCK_TOKENS - max(longer_than, 0)
        size = None if self._block_bytes is None else len(keys) * self._block_bytes
        if not self.worth.disk_pays(gained, size):
            return None  # prefilling them is sooner on this machine
        started = time.perf_counter()
        blocks = []
        # A damaged, crafted or vanished block ends the prefix there: the store reads only
        # blocks of this model's layout, so the ones kept fit together.
        for key in keys:
            tensors = self.store.read(key)
            if tensors is None:
                break
            blocks.append(tensors)
        if blocks:
            read = sum(array.nbytes for tensors in blocks for _, array in tensors.values())
            self._block_bytes = read // len(blocks)
            self.worth.moved(read, time.perf_counter() - started)
        if len(blocks) * BLOCK_TOKENS <= longer_than:
            return None
        try:
            cache = cache_of(blocks, self._quantized)
        except (KeyError, ValueError):  # blocks that checked out but do not fit together
            return None
        self.store.touch(keys[: len(blocks)])
        return DiskHit(cache, len(blocks) * BLOCK_TOKENS, time.perf_counter() - started)

    def save(self, tokens: list[int], cache: list, force: bool = False) -> int:
        """Queue the whole blocks of a finished conversation's cache that are not on disk;
        how many of its first tokens the disk then holds (queued blocks included). `force`:
        even where reading them back would not pay (a client marked a prefix to keep)."""
        held = min(min(c.offset for c in cache), len(tokens))
        keys = self.keys(tokens, held // BLOCK_TOKENS)
        if not keys or held < self._shortest:
            return 0
        self._block_bytes = block_bytes(cache)
        worth = self.worth.disk_pays(len(keys) * BLOCK_TOKENS, len(keys) * self._block_bytes)
        if not (worth or force):
            return 0  # it would never be read back: prefilling it again is sooner here
        have = self.store.present(keys)
        missing = {i: key for i, key in enumerate(keys) if i >= have}
        if missing and not self.store.room_for(len(missing) * self._block_bytes):
            return have * BLOCK_TOKENS  # the writer is behind or the disk is full: no copy
        blocks = to_host_all({key: block_of(cache, i) for i, key in missing.items()})
        self.store.save(keys, blocks, len(keys) * BLOCK_TOKENS)
        return len(keys) * BLOCK_TOKENS
