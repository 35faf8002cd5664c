"""A directory of KV cache blocks: looked up by key, written by one thread, kept in size.

Keys are content addresses (a chained hash of the tokens, salted with the model), so two
gateways sharing the directory write the same bytes under the same name and never need to
agree on anything: a rename is atomic, a block evicted by one is a miss for the other.
The least recently used blocks go first when the directory passes `max_bytes`; a block's
mtime is its last use, and a chain is touched tail-first so that its tail is older than its
head: eviction shortens chains from the end rather than cutting their first block.

Whoever else can write the directory must not turn it against the disk around it: a shard
is opened as a directory with O_NOFOLLOW and every file is reached through it, so listing,
reading, touching and deleting never follow a symbolic link out of the cache; only regular
files are counted, read or evicted. The directories are made 0700 and the blocks 0600.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from engines.cache import CacheDir
from engines.cache.blockfile import (
    TEMPORARY,
    CorruptBlock,
    Layout,
    max_file_bytes,
    read_block,
    write_block,
)
from engines.log import emit
from engines.private_files import DIR_MODE, private_dir
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
    for _, name, found in _entries(root):
        size += found.st_size
        blocks += name.endswith(SUFFIX)
    return blocks, size


@contextlib.contextmanager
def _shard(root: Path, name: str, create: bool = False) -> Iterator[int]:
    """A descriptor of the shard directory `name` under `root`, opened only if it is a
    directory there and not a link to one elsewhere (OSError otherwise); made 0700 when
    `create`."""
    if create:
        private_dir(root)
        with contextlib.suppress(FileExistsError):
            os.mkdir(root / name, DIR_MODE)
    fd = os.open(root / name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _entries(root: Path) -> Iterable[tuple[str, str, os.stat_result]]:
    """(shard, file name, stat) of every regular file in the shards, links not followed."""
    try:
        shards = [e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return
    for shard in shards:
        try:
            with _shard(root, shard) as fd:
                names = os.listdir(fd)
                for name in names:
                    try:
                        found = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except FileNotFoundError:  # removed meanwhile (another gateway's eviction)
                        continue
                    if stat.S_ISREG(found.st_mode):
                        yield shard, name, found
        except OSError:  # gone meanwhile, or replaced by a link: not ours to walk
            continue


def _remove(root: Path, shard: str, name: str) -> None:
    """Delete a file of a shard, the shard reached without following links."""
    with contextlib.suppress(OSError), _shard(root, shard) as fd:
        os.unlink(name, dir_fd=fd)


class BlockStore:
    """One model's door to the directory; reads on the caller's thread, writes on its own."""

    def __init__(
        self,
        where: CacheDir,
        model: str,
        written: Callable[[int, float], None] | None = None,
        layout: Layout | None = None,
        max_block_bytes: int | None = None,
    ) -> None:
        """`written(bytes, seconds)` hears of each save's writes, on the writer's thread;
        `layout`, the tensors a block of this model holds: a block read must be exactly
        that; `max_block_bytes`, the largest file read as a block (from `layout` if not
        given)."""
        self.root = where.path
        self._layout = layout
        if max_block_bytes is None and layout is not None:
            max_block_bytes = max_file_bytes(layout)
        self._max_block_bytes = max_block_bytes
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
            try:
                with _shard(self.root, key[:2]) as fd:
                    found = os.stat(f"{key}{SUFFIX}", dir_fd=fd, follow_symlinks=False)
            except OSError:
                return count
            if not stat.S_ISREG(found.st_mode):
                return count
        return len(keys)

    def read(self, key: str) -> Tensors | None:
        """The block's tensors; None if it is gone or damaged (then removed and reported)."""
        name = f"{key}{SUFFIX}"
        try:
            with _shard(self.root, key[:2]) as fd:
                try:
                    return read_block(name, self._layout, self._max_block_bytes, dir_fd=fd)
                except CorruptBlock as error:
                    with contextlib.suppress(OSError):  # a link goes, never where it points
                        os.unlink(name, dir_fd=fd)
                    reason = str(error)
        except OSError:  # gone (a miss), or a shard that is not a directory of ours
            return None
        emit(CacheCorrupt(model=self._model, block=key, reason=reason), level="warning")
        return None

    def touch(self, keys: list[str]) -> None:
        """Mark a chain used now, its head the most recent (see the module's docstring)."""
        now = time.time()
        for depth, key in enumerate(keys):
            stamp = now - depth * 1e-3
            with contextlib.suppress(OSError), _shard(self.root, key[:2]) as fd:
                name = f"{key}{SUFFIX}"
                os.utime(name, (stamp, stamp), dir_fd=fd, follow_symlinks=False)

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
                if self.present([key]):  # another gateway wrote it meanwhile: the same bytes
                    continue
                with _shard(self.root, key[:2], create=True) as fd:
                    size += write_block(Path(f"{key}{SUFFIX}"), tensors, dir_fd=fd)
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
        for shard, name, found in _entries(self.root):
            if name.endswith(TEMPORARY) and now - found.st_mtime > STALE_TEMPORARY_S:
                _remove(self.root, shard, name)
                continue
            total += found.st_size
            if name.endswith(SUFFIX):
                entries.append((found.st_mtime, found.st_size, shard, name))
        if total <= self.max_bytes:
            return total
        removed = freed = 0
        for _, size, shard, name in sorted(entries):
            if total - freed <= self.max_bytes:
                break
            _remove(self.root, shard, name)
            removed += 1
            freed += size
        emit(CacheEvicted(model=self._model, blocks=removed, bytes=freed, dir_bytes=total - freed))
        return total - freed
