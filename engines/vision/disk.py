"""The disk tier under a vision model's block cache (mlx-vlm's APC), on the gateway's own
block directory (engines/cache): the same files, checks, LRU and events as a text model's.

mlx-vlm's `APCManager` takes a disk store: it hands the store each prompt's new blocks when
it stores them in RAM (after the prompt's prefill) and asks it for the blocks of a prompt's
chain that RAM lacks. `APCDisk` is that store. APC's chain hash covers the block's tokens,
the blocks before it and the pictures' hash (`_apc_semantic_hash`, engines/vision/batch.py),
so a prompt with another picture finds no block past the text before it; the file's key
salts that hash with the model (`salt_of`), and each block keeps its tokens and picture
hash, which APC checks on the way back.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engines.cache import CacheDir
from engines.cache.blockfile import MAX_HEADER_BYTES
from engines.cache.store import BlockStore
from engines.mlx.cache.blocks import joined, to_host_all
from engines.mlx.cache.salt import salt_of
from engines.mlx.cache.worth import Worth

# Where a block keeps its token ids and, last, the pictures' hash.
TOKENS = "tokens"


class APCDisk:
    """A vision model's blocks on disk, in the shape of mlx-vlm's `DiskBlockStore` as its
    `APCManager` uses it for dense KV caches."""

    def __init__(
        self,
        where: CacheDir,
        model_id: str,
        path: Path,
        meaning: str,
        *,
        block_tokens: int,
        shortest: int,
        kv_bytes_per_token: int | None = None,
    ) -> None:
        """`block_tokens`: APC's block size; `shortest`: prompts shorter are not saved;
        `kv_bytes_per_token`: the model's estimate, which bounds the files read as blocks."""
        self.worth = Worth()
        self.block_tokens = block_tokens
        largest = None
        if kv_bytes_per_token:  # twice the estimate: its element size is the weights'
            largest = 2 * kv_bytes_per_token * block_tokens + 8 * (block_tokens + 1)
            largest += 8 + MAX_HEADER_BYTES
        self.store = BlockStore(where, model_id, self.worth.moved, max_block_bytes=largest)
        self._salt = salt_of(path, meaning)
        self._shortest = shortest
        self._block_bytes = 0  # one block's bytes, once a block was seen
        # Reads not yet told to the request they were for (`taken`): last hash → (tokens, s).
        self._reads: dict[int, list[tuple[int, float]]] = {}

    # -- what APCManager calls --------------------------------------------------------

    def set_write_callbacks(self, written, failed) -> None:
        """APC's own write counters: the store's events say it here (`cache_saved`)."""

    def flush(self) -> None:
        """APC waits for its store's writes before a prefill; the store's backlog is bounded
        (`MAX_PENDING_BYTES`) and never worth stalling the model's thread for."""

    def close(self) -> None:
        self.store.close()

    def has(self, block_hash: int) -> bool:
        return self.store.present([self._key(block_hash)]) == 1

    def prefix_cache_bytes(self, block_hashes: Sequence[int]) -> int:
        return len(block_hashes) * self._block_bytes

    def find_exact_prefix(self, *args, **kwargs) -> None:
        """Whole-prompt snapshots (recurrent layers) are not kept: no hit."""
        return None

    def save_exact_cache(self, *args, **kwargs) -> bool:
        return False

    def load_layer_major_prefix(self, block_hashes: Sequence[int], **_):
        """Every layer's keys and values over the blocks, and each block's tokens and
        pictures' hash; None when the disk is slower than a prefill here, or a block is gone
        or damaged (then removed and reported): the prompt is prefilled."""
        import mlx.core as mx

        tokens = len(block_hashes) * self.block_tokens
        if not self.worth.disk_pays(tokens, self.prefix_cache_bytes(block_hashes) or None):
            return None
        started = time.perf_counter()
        blocks = []
        for block_hash in block_hashes:
            tensors = self.store.read(self._key(block_hash))
            if tensors is None:
                return None
            blocks.append(tensors)
        nbytes = sum(a.nbytes for tensors in blocks for _, a in tensors.values())
        self._block_bytes = nbytes // len(blocks)
        layers = (len(blocks[0]) - 1) // 2
        try:  # blocks that checked out but do not fit together: prefilled
            keys = [joined(blocks, f"{layer}.keys") for layer in range(layers)]
            values = [joined(blocks, f"{layer}.values") for layer in range(layers)]
            mx.eval(keys + values)
            metadata = []
            for tensors in blocks:
                *ids, extra = tensors[TOKENS][1].tolist()
                metadata.append({"token_ids": ",".join(map(str, ids)), "extra_hash": str(extra)})
        except (KeyError, ValueError, TypeError):
            return None
        seconds = time.perf_counter() - started
        self.worth.moved(nbytes, seconds)
        self.store.touch([self._key(h) for h in block_hashes])
        self._reads.setdefault(block_hashes[-1], []).append((tokens, seconds))
        return keys, values, metadata

    def save_layer_major_blocks(self, blocks, layer_keys, layer_values, block_size: int) -> None:
        """Queue `blocks` (APC's records of the prompt's blocks not on disk) for the writer,
        copied out of the prompt's cache (`layer_keys`, `layer_values`: per layer, over the
        whole prompt) on this, the model's, thread."""
        if not blocks:
            return
        tokens = (max(b.source_block_idx for b in blocks) + 1) * block_size
        per_block = sum(k.nbytes // k.shape[2] for k in layer_keys + layer_values) * block_size
        self._block_bytes = per_block
        if tokens < self._shortest:
            return
        if not self.worth.disk_pays(tokens, tokens // block_size * per_block):
            return  # prefilling it again is sooner on this machine
        if not self.store.room_for(len(blocks) * per_block):
            return  # the writer is behind or the disk is full
        keys = [self._key(b.block_hash) for b in blocks]
        copies = to_host_all(
            {
                key: _block_of(b, layer_keys, layer_values, block_size)
                for key, b in zip(keys, blocks, strict=True)
            }
        )
        self.store.save(keys, copies, tokens)

    # -- what the batch asks ----------------------------------------------------------

    def taken(self, ids: Sequence[int], extra_hash: int, cached: int):
        """(tokens, seconds) of the disk read that gave a prompt its first `cached` tokens,
        or None when they came from RAM. The read is found by its last block's hash, which
        APC chains as here."""
        from mlx_vlm.apc import SEED_PARENT_HASH, _hash_tokens

        size = self.block_tokens
        if cached < size or not self._reads:
            return None
        parent = SEED_PARENT_HASH
        for i in range(cached // size):
            chunk = tuple(int(t) for t in ids[i * size : (i + 1) * size])
            parent = _hash_tokens(parent, chunk, extra_hash)
        reads = self._reads.get(parent)
        if not reads:
            return None
        found = reads.pop(0)
        if not reads:
            del self._reads[parent]
        return found

    def forget_reads(self) -> None:
        """Drop reads no request claimed (a hit mlx-vlm then set aside); the batch is idle."""
        self._reads.clear()

    def _key(self, block_hash: int) -> str:
        chained = block_hash.to_bytes(8, "little", signed=True)
        return hashlib.blake2b(self._salt + chained, digest_size=20).hexdigest()


def _block_of(block, layer_keys, layer_values, block_size: int) -> dict:
    """One block's tensors: every layer's keys and values as MLX slices (`to_host_all`
    copies them out), and its tokens."""
    start = block.source_block_idx * block_size
    tensors = {}
    for name, arrays in (("keys", layer_keys), ("values", layer_values)):
        for layer, array in enumerate(arrays):
            tensors[f"{layer}.{name}"] = array[..., start : start + block_size, :]
    ids = np.array([*block.token_ids, block.extra_hash], dtype=np.int64)
    tensors[TOKENS] = ("I64", ids)
    return tensors


def block_cache(blocks: int, block_tokens: int, disk: APCDisk | None):
    """mlx-vlm's `APCManager` of `blocks` blocks over `disk` (None: RAM only).

    mlx-vlm asks its disk for a prompt's whole length, then refuses a prefix that covers
    the whole prompt (its last token must go through the model for the first logits): a
    prompt of whole blocks would never be read back. Asked here for all but the last token.
    """
    from mlx_vlm.apc import APCManager

    class BlockCache(APCManager):
        def lookup_prefix_disk_cache(self, token_ids, extra_hash=0, max_prefix_tokens=None, **kw):
            cap = len(token_ids) - 1
            if max_prefix_tokens is not None and max_prefix_tokens > 0:
                cap = min(cap, max_prefix_tokens)
            return super().lookup_prefix_disk_cache(
                token_ids, extra_hash, max_prefix_tokens=cap, **kw
            )

    return BlockCache(num_blocks=blocks, block_size=block_tokens, disk=disk)
