"""A directory of KV cache blocks: looked up by key, written by one thread, kept in size.

Keys are content addresses (a chained hash of the tokens, salted with the model), so two
gateways sharing the directory write the same bytes under the same name and never need to
agree on anything: a rename is atomic, a block evicted by one is a miss for the other.
The least recently used blocks go first when the directory passes `max_bytes`; a block's
mtime is its last use, and a chain is touched tail-first so that its tail is older than its
head: eviction shortens chains from the end rather than cutting their first block.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from engines.cache import CacheDir
from engines.cache.blockfile import TEMPORARY, CorruptBlock, read_block, write_block
from engines.log import emit
from schemas.events import CacheCorrupt, CacheEvicted, CacheSaved, CacheUnwritable

SUFFIX = ".safetensors"
# A temporary file this old was left by a writer that died: swept when the directory shrinks.
STALE_TEMPORARY_S = 600.0
# Bytes of blocks waiting for the writer at most; past that a save is dropped (the cache is
# a help, not a promise): a writer behind a slow disk never holds more RAM than this. One
# save larger than the bound is taken when nothing waits: a 32k-token prompt of an 8B model
# is 4 GiB of KV, and an agent's long prompt is the one most worth keeping.
MAX_PENDING_BYTES = 1 << 30

Tensors = dict[str, tuple[str, np.ndarray]]


def block_path(root: Path, key: str) -> Path:
    return root / key[:2] / f"{key}{SUFFIX}"


def disk_usage(root: Path) -> tuple[int, int]:
    """(blocks, bytes) in the directory, temporary files included in the bytes."""
    blocks = size = 0
    for path, stat in _entries(root):
        size += stat.st_size
        blocks += path.name.endswith(SUFFIX)
    return blocks, size


def _entries(root: Path) -> Iterable[tuple[Path, os.stat_result]]:
    try:
        shards = list(os.scandir(root))
    except FileNotFoundError:
        return
    for shard in shards:
        if not shard.is_dir():
            continue
        try:
            files = list(os.scandir(shard.path))
        except FileNotFoundError:
            continue
        for entry in files:
            try:
                yield Path(entry.path), entry.stat()
            except FileNotFoundError:  # removed meanwhile (another gateway's eviction)
                continue


class BlockStore:
    """One model's door to the directory; reads on the caller's thread, writes on its own."""

    def __init__(
        self, where: CacheDir, model: str, written: Callable[[int, float], None] | None = None
    ) -> None:
        """`written(bytes, seconds)` hears of each save's writes, on the writer's thread."""
        self.root = where.path
        self._written = written
        self.max_bytes = where.max_bytes
        self._model = model
        self._pending: queue.SimpleQueue = queue.SimpleQueue()
        self._pending_bytes = 0  # of the saves queued; changed under `_lock`
        self._lock = threading.Lock()
        self._writable = True  # False after a write failed (disk full): RAM only from then
        # The writer's events reach the listeners (metrics) of the context it was made in
        # (the model's load): a new thread starts with none.
        context = contextvars.copy_context()
        self._writer = threading.Thread(
            target=context.run, args=(self._write_loop,), name=f"kv-disk {model}"
        )
        self._writer.daemon = True
        self._writer.start()

    def present(self, keys: list[str]) -> int:
        """How many of `keys`, from the first, are on disk."""
        for count, key in enumerate(keys):
            if not block_path(self.root, key).is_file():
                return count
        return len(keys)

    def read(self, key: str) -> Tensors | None:
        """The block's tensors; None if it is gone or damaged (then removed and reported)."""
        path = block_path(self.root, key)
        try:
            return read_block(path)
        except FileNotFoundError:
            return None
        except CorruptBlock as error:
            path.unlink(missing_ok=True)
            emit(CacheCorrupt(model=self._model, block=key, reason=str(error)), level="warning")
            return None
        except OSError:
            return None

    def touch(self, keys: list[str]) -> None:
        """Mark a chain used now, its head the most recent (see the module's docstring)."""
        now = time.time()
        for depth, key in enumerate(keys):
            stamp = now - depth * 1e-3
            with contextlib.suppress(OSError):
                os.utime(block_path(self.root, key), (stamp, stamp))

    def save(self, chain: list[str], blocks: dict[str, Tensors], tokens: int) -> None:
        """Write `blocks` (key → tensors, the ones of `chain` not on disk) off this thread,
        then touch the whole `chain`. Dropped when the writer is behind or disk is full."""
        size = sum(a.nbytes for tensors in blocks.values() for _, a in tensors.values())
        with self._lock:
            if not self._takes(size):
                return
            self._pending_bytes += size
        self._pending.put((chain, blocks, tokens, size))

    def room_for(self, size: int) -> bool:
        """Whether a save of `size` bytes would be taken now; asked before the blocks are
        copied out of the model's memory, so a save that would be dropped costs nothing."""
        with self._lock:
            return self._takes(size)

    def _takes(self, size: int) -> bool:  # under `_lock`
        fits = self._pending_bytes == 0 or self._pending_bytes + size <= MAX_PENDING_BYTES
        return self._writable and fits

    def close(self) -> None:
        """Finish the writes under way and stop the writer (the model unloads)."""
        self._pending.put(None)
        self._writer.join()

    def _write_loop(self) -> None:
        while (job := self._pending.get()) is not None:
            *work, size = job
            if self._writable:
                self._write(*work)
            with self._lock:
                self._pending_bytes -= size

    def _write(self, chain: list[str], blocks: dict[str, Tensors], tokens: int) -> None:
        started = time.perf_counter()
        written = size = 0
        try:
            for key, tensors in blocks.items():
                path = block_path(self.root, key)
                if path.is_file():  # another gateway wrote it meanwhile: the same bytes
                    continue
                path.parent.mkdir(parents=True, exist_ok=True)
                size += write_block(path, tensors)
                written += 1
        except OSError as error:
            self._writable = False
            reason = f"{type(error).__name__}: {error.strerror or error}"
            emit(
                CacheUnwritable(model=self._model, dir=str(self.root), reason=reason),
                level="warning",
            )
            return
        self.touch(chain)
        if not written:
            return
        if self._written is not None:
            self._written(size, time.perf_counter() - started)
        on_disk = self._shrink()
        emit(
            CacheSaved(
                model=self._model,
                blocks=written,
                tokens=tokens,
                bytes=size,
                save_s=round(time.perf_counter() - started, 4),
                dir_bytes=on_disk,
            )
        )

    def _shrink(self) -> int:
        """Remove least recently used blocks (and dead writers' leftovers) past `max_bytes`;
        the directory's bytes after."""
        now = time.time()
        entries, total = [], 0
        for path, stat in _entries(self.root):
            if path.name.endswith(TEMPORARY) and now - stat.st_mtime > STALE_TEMPORARY_S:
                path.unlink(missing_ok=True)
                continue
            total += stat.st_size
            if path.name.endswith(SUFFIX):
                entries.append((stat.st_mtime, stat.st_size, path))
        if total <= self.max_bytes:
            return total
        removed = freed = 0
        for _, size, path in sorted(entries):
            if total - freed <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            removed += 1
            freed += size
        emit(CacheEvicted(model=self._model, blocks=removed, bytes=freed, dir_bytes=total - freed))
        return total - freed
