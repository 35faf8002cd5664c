"""The disk tier of an mlx-lm model's KV cache: blocks of `BLOCK_TOKENS` tokens per file.

Block i of a prompt holds every layer's keys and values for tokens [i·B, (i+1)·B); its key
hashes the key of block i-1 with its own tokens, so a key names the whole prefix up to it
and any shared prefix finds its blocks. The first key is salted with all that changes
what the cache means: the weights' files (a hub blob's name is its sha256), how they are
held (dtype), `kv_bits`, the platform and this format.

Saving copies the blocks not yet on disk out of MLX on the model's thread (a memory copy);
the store's thread writes them. Loading reads and checks files on the model's thread,
where the cache is needed. Both happen only where the disk is sooner than the prefill it
replaces, as this model's own rates on this machine say (`Worth`), kept across restarts
beside the blocks (engines/mlx/cache/rates.py).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from engines.cache import CacheDir
from engines.cache.store import BlockStore
from engines.mlx.cache.rates import rates_path, read_rates, write_rates

# Small enough that the tail a reused prompt must prefill again (under one block, plus the
# new turn) is a small part of a long prompt: at 256, a 2k-token prompt after a restart
# took 0.16x its cold time to the first token on the CPU, most of it the 182-token tail.
BLOCK_TOKENS = 64
# The shortest conversation saved. On CUDA a prefill of a couple of thousand tokens takes
# a fraction of a second, while saving copies the cache out of GPU memory on the model's
# thread, between the batch's steps: only long prompts are worth it there (not measured
# yet: bench/disk_cache.py --source on the H200 is the way to tune it).
MIN_TOKENS_CUDA = 2048
FORMAT = b"mlx-gateway-kv/1"
# MLX dtypes as safetensors names them; bfloat16 crosses into numpy as raw 16 bits.
DTYPE_NAMES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "uint32": "U32"}
# Files whose content is the model's meaning; hashed by name, size and identity.
MEANING_SUFFIXES = (".safetensors", ".json", ".gguf")


class DiskHit(NamedTuple):
    """What a lookup found on disk: the cache, the tokens it covers, the seconds it took."""

    cache: list
    tokens: int
    seconds: float


def weights_identity(path: Path) -> bytes:
    """A digest of the model's files: names, sizes, mtimes, and where the Hub cache links
    them, the blob's name (its content's sha256). A changed file changes the salt."""
    digest = hashlib.blake2b(digest_size=16)
    files = [path] if path.is_file() else sorted(path.iterdir())
    for file in files:
        if not file.name.endswith(MEANING_SUFFIXES):
            continue
        stat = file.stat()
        real = os.path.realpath(file)
        digest.update(f"{file.name}|{Path(real).name}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return digest.digest()


def salt_of(path: Path, meaning: str) -> bytes:
    """The first key's salt: this format, the model's files (`weights_identity`) and
    `meaning`, how the cache is computed beyond the files (dtype, kv_bits, device)."""
    return hashlib.blake2b(FORMAT + weights_identity(path) + meaning.encode()).digest()


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
    ) -> DiskKV:
        """`meaning`: how the cache is computed beyond the files (dtype, kv_bits, device);
        `quantized`: (group size, bits) of a `QuantizedKVCache`'s blocks, None for `KVCache`."""
        worth = Worth()
        store = BlockStore(where, model_id, worth.moved)
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
        for key in keys:  # a damaged or vanished block ends the prefix there
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
            cache = _cache_of(blocks, self._quantized)
        except (KeyError, ValueError):  # blocks that checked out but do not fit together
            return None
        self.store.touch(keys[: len(blocks)])
        return DiskHit(cache, len(blocks) * BLOCK_TOKENS, time.perf_counter() - started)

    def save(self, tokens: list[int], cache: list) -> None:
        """Queue the whole blocks of a finished conversation's cache that are not on disk."""
        held = min(min(c.offset for c in cache), len(tokens))
        keys = self.keys(tokens, held // BLOCK_TOKENS)
        if not keys or held < self._shortest:
            return
        self._block_bytes = _block_bytes(cache)
        if not self.worth.disk_pays(len(keys) * BLOCK_TOKENS, len(keys) * self._block_bytes):
            return  # it would never be read back: prefilling it again is sooner here
        have = self.store.present(keys)
        missing = {i: key for i, key in enumerate(keys) if i >= have}
        if missing and not self.store.room_for(len(missing) * self._block_bytes):
            return  # the writer is behind or the disk is full: no copy out of MLX for nothing
        blocks = to_host_all({key: _block_of(cache, i) for i, key in missing.items()})
        self.store.save(keys, blocks, len(keys) * BLOCK_TOKENS)


def _block_bytes(cache: list) -> int:
    """The bytes one block of `cache` takes, every layer's keys and values."""
    total = 0
    for c in cache:
        for _, array in layer_arrays(c):
            per_token = array.nbytes // array.shape[-2]  # (batch, heads, tokens, dims)
            total += per_token * BLOCK_TOKENS
    return total


def _block_of(cache: list, index: int) -> dict:
    """Block `index` of every layer, as MLX slices (`to_host_all` copies them out)."""
    start, end = index * BLOCK_TOKENS, (index + 1) * BLOCK_TOKENS
    tensors = {}
    for layer, c in enumerate(cache):
        for name, array in layer_arrays(c):
            tensors[f"{layer}.{name}"] = array[..., start:end, :]
    return tensors


def to_host_all(blocks: dict[str, dict]) -> dict[str, dict]:
    """Blocks (key → name → MLX array, or an already host `(dtype, ndarray)` pair) copied
    into numpy as `(safetensors dtype, ndarray)`, bfloat16 as its raw 16 bits.

    Every slice is evaluated in one `mx.eval` first: converting them one by one waits for
    the device once per array (a 2,048-token conversation of a 30-layer model is 1,920 of
    them, on the model's thread, between two steps of its batch)."""
    import mlx.core as mx

    def host_view(part):
        if isinstance(part, tuple):
            return part
        dtype = DTYPE_NAMES[str(part.dtype).removeprefix("mlx.core.")]
        return dtype, part.view(mx.uint16) if dtype == "BF16" else part

    viewed = {key: {n: host_view(p) for n, p in tensors.items()} for key, tensors in blocks.items()}
    parts = [p for tensors in viewed.values() for _, p in tensors.values()]
    mx.eval([p for p in parts if isinstance(p, mx.array)])
    return {
        key: {n: (dtype, np.array(p, copy=True)) for n, (dtype, p) in tensors.items()}
        for key, tensors in viewed.items()
    }


def joined(blocks: list[dict], name: str):
    """The blocks' arrays under `name`, back in MLX, joined along the token axis."""
    import mlx.core as mx

    parts = []
    for tensors in blocks:
        dtype, array = tensors[name]
        part = mx.array(array)
        parts.append(part.view(mx.bfloat16) if dtype == "BF16" else part)
    return mx.concatenate(parts, axis=2)


def layer_arrays(c) -> list[tuple[str, object]]:
    """A layer cache's arrays by name: a `KVCache`'s keys and values, a `QuantizedKVCache`'s
    packed values, scales and biases of each (its keys and values are such triples)."""
    if isinstance(c.keys, (tuple, list)):
        return [
            (f"{n}.{i}", a)
            for n, kv in (("keys", c.keys), ("values", c.values))
            for i, a in enumerate(kv)
        ]
    return [("keys", c.keys), ("values", c.values)]


def _cache_of(blocks: list[dict], quantized: tuple[int, int] | None = None) -> list:
    """One `KVCache` per layer holding the blocks in order (a `QuantizedKVCache` of
    `quantized` = (group size, bits) when given)."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache, QuantizedKVCache

    layers = len(blocks[0]) // (6 if quantized else 2)
    cache = []
    for layer in range(layers):
        if quantized:
            c = QuantizedKVCache(*quantized)
            c.keys, c.values = (
                tuple(joined(blocks, f"{layer}.{n}.{i}") for i in range(3))
                for n in ("keys", "values")
            )
            c.offset = c.keys[0].shape[2]
        else:
            c = KVCache()
            c.keys, c.values = joined(blocks, f"{layer}.keys"), joined(blocks, f"{layer}.values")
            c.offset = c.keys.shape[2]
        cache.append(c)
    mx.eval([(c.keys, c.values) for c in cache])
    return cache
