"""One block of KV cache as a file: safetensors bytes with a checksum, written atomically.

The format is plain safetensors (an 8-byte header length, a JSON header, the tensors'
bytes), written and read here with numpy so that neither needs MLX or the model's thread.
The header's metadata carries a CRC-32 of the tensor bytes: a block cut short by a kill
or flipped on disk fails `read_block` with `CorruptBlock` instead of feeding the model
garbage. A block is written under a temporary name and renamed into place, so a reader
(this gateway or another sharing the directory) sees a whole file or none.

The CRC is no authentication: whoever can write the directory can write a block whose
CRC holds. So a read trusts nothing but what the model it is for allows: the file is opened
where it is (never through a symbolic link), must be a regular file no larger than such a
block, its header short and flat, and its tensors exactly the model's (`Layout`: names,
dtypes, shapes); anything else is `CorruptBlock`. The directory is private (0700, blocks
0600): what a block holds is still the writer's word (docs/security.md).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import struct
import zlib
from pathlib import Path

import msgspec
import numpy as np

from engines.private_files import NO_FOLLOW, create_private

FORMAT = "mlx-gateway-kv/1"
# safetensors dtype names; bfloat16 travels as its raw 16 bits (numpy has no bfloat16).
# U32: a quantized KV cache's packed values; I64: token ids a block is checked against.
DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "BF16": np.uint16,
    "U32": np.uint32,
    "I64": np.int64,
}
TEMPORARY = ".tmp"  # suffix of a block being written; never read, swept when stale
# A header names each tensor in under 100 bytes: a 100-layer quantized cache's (600
# tensors) is under 64 KiB. Past this the file is not ours, and is not parsed.
MAX_HEADER_BYTES = 1 << 20
# The header as it is decoded: flat by its type (two levels of objects, then strings or
# lists of integers), so a header nested 100k deep fails at its third level, unparsed.
Header = dict[str, dict[str, str | list[int]]]
# What a model's block holds: tensor name → (safetensors dtype, shape).
Layout = dict[str, tuple[str, tuple[int, ...]]]


class CorruptBlock(Exception):
    """A block file that is not what was written (cut short, altered, not ours)."""


def layout_bytes(layout: Layout) -> int:
    """The tensor bytes a block of `layout` holds."""
    return sum(
        int(np.prod(shape, dtype=np.int64)) * np.dtype(DTYPES[dtype]).itemsize
        for dtype, shape in layout.values()
    )


def max_file_bytes(layout: Layout) -> int:
    """The largest file a block of `layout` may be: its tensors and the longest header."""
    return 8 + MAX_HEADER_BYTES + layout_bytes(layout)


def write_block(
    path: Path, tensors: dict[str, tuple[str, np.ndarray]], dir_fd: int | None = None
) -> int:
    """Write `tensors` (name → (dtype name, array)) to `path` atomically, 0600; the bytes
    written. With `dir_fd`, `path` is a name in that directory.

    Raises OSError (disk full, read-only directory) with nothing left at `path`.
    """
    header: dict = {}
    offset = 0
    for name, (dtype, array) in tensors.items():
        size = array.nbytes
        header[name] = {"dtype": dtype, "shape": list(array.shape)}
        header[name]["data_offsets"] = [offset, offset + size]
        offset += size
    crc = 0
    for _, array in tensors.values():
        crc = zlib.crc32(memoryview(np.ascontiguousarray(array)).cast("B"), crc)
    header["__metadata__"] = {"format": FORMAT, "crc32": str(crc)}
    encoded = msgspec.json.encode(header)
    encoded += b" " * (-len(encoded) % 8)  # safetensors aligns the data to 8 bytes
    path = Path(path)
    temporary = f"{path.name}.{os.getpid()}.{os.urandom(4).hex()}{TEMPORARY}"
    temporary_path = temporary if dir_fd is not None else str(path.with_name(temporary))
    target = path.name if dir_fd is not None else str(path)
    try:
        with open(create_private(temporary_path, dir_fd), "wb") as out:
            out.write(struct.pack("<Q", len(encoded)))
            out.write(encoded)
            for _, array in tensors.values():
                out.write(memoryview(np.ascontiguousarray(array)).cast("B"))
        os.replace(temporary_path, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary_path, dir_fd=dir_fd)
        raise
    return 8 + len(encoded) + offset


def read_block(
    path: Path | str,
    layout: Layout | None = None,
    max_bytes: int | None = None,
    dir_fd: int | None = None,
) -> dict[str, tuple[str, np.ndarray]]:
    """The tensors of the block at `path`, checked against its checksum and, given a
    `layout`, against the model's names, dtypes and shapes (then no larger than such a
    block may be, unless `max_bytes` says). With `dir_fd`, `path` is a name there.

    Raises FileNotFoundError when it is gone (another gateway evicted it: a miss) and
    `CorruptBlock` when it is there but is not a block of this model: damaged, crafted, a
    symbolic link, not a regular file, too large.
    """
    if max_bytes is None and layout is not None:
        max_bytes = max_file_bytes(layout)
    data = _read_file(path, max_bytes, dir_fd)
    try:
        return _parse(data, layout)
    except CorruptBlock:
        raise
    except (
        struct.error,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        OverflowError,
        RecursionError,
        MemoryError,
        msgspec.MsgspecError,
    ) as error:
        raise CorruptBlock(f"unreadable: {type(error).__name__}") from None


def _read_file(path: Path | str, max_bytes: int | None, dir_fd: int | None) -> bytes:
    """The file's bytes, opened where it is: never through a link, never a FIFO's wait."""
    try:
        fd = os.open(path, os.O_RDONLY | NO_FOLLOW, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise CorruptBlock("a symbolic link") from None
        raise
    with open(fd, "rb") as file:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise CorruptBlock("not a regular file")
        if max_bytes is not None and found.st_size > max_bytes:
            raise CorruptBlock(f"{found.st_size} bytes, more than a block takes ({max_bytes})")
        return file.read(found.st_size if max_bytes is None else max_bytes + 1)


def _parse(data: bytes, layout: Layout | None) -> dict[str, tuple[str, np.ndarray]]:
    (length,) = struct.unpack_from("<Q", data)
    if length > MAX_HEADER_BYTES:
        raise CorruptBlock(f"unreadable: a header of {length} bytes")
    header = msgspec.json.decode(data[8 : 8 + length], type=Header)
    metadata = header.pop("__metadata__")
    if metadata.get("format") != FORMAT:
        raise CorruptBlock(f"format {metadata.get('format')!r}")
    if layout is not None:
        _check_layout(header, layout)
    body = memoryview(data)[8 + length :]
    tensors = {}
    for name, entry in header.items():
        start, end = entry["data_offsets"]
        if not 0 <= start <= end:
            raise CorruptBlock(f"{name}: offsets {start}..{end}")
        if end > len(body):
            raise CorruptBlock("cut short")
        dtype = DTYPES[entry["dtype"]]
        array = np.frombuffer(body[start:end], dtype=dtype).reshape(entry["shape"])
        tensors[name] = (entry["dtype"], array)
    crc = 0
    for _, array in tensors.values():
        crc = zlib.crc32(memoryview(array).cast("B"), crc)
    if str(crc) != metadata.get("crc32"):
        raise CorruptBlock("checksum mismatch")
    return tensors


def _check_layout(header: dict, layout: Layout) -> None:
    """Refuse a header whose tensors are not exactly the model's block's."""
    if set(header) != set(layout):
        missing, extra = sorted(set(layout) - set(header)), sorted(set(header) - set(layout))
        raise CorruptBlock(f"not this model's tensors (missing {missing[:3]}, extra {extra[:3]})")
    for name, (dtype, shape) in layout.items():
        entry = header[name]
        if entry.get("dtype") != dtype or tuple(entry.get("shape", ())) != shape:
            found = f"{entry.get('dtype')} {entry.get('shape')}"
            raise CorruptBlock(f"{name}: {found}, not this model's {dtype} {list(shape)}")
