"""One block of KV cache as a file: safetensors bytes with a checksum, written atomically.

The format is plain safetensors (an 8-byte header length, a JSON header, the tensors'
bytes), written and read here with numpy so that neither needs MLX or the model's thread.
The header's metadata carries a CRC-32 of the tensor bytes: a block cut short by a kill
or flipped on disk fails `read_block` with `CorruptBlock` instead of feeding the model
garbage. A block is written under a temporary name and renamed into place, so a reader
(this gateway or another sharing the directory) sees a whole file or none.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np

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


class CorruptBlock(Exception):
    """A block file that is not what was written (cut short, altered, not ours)."""


def write_block(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> int:
    """Write `tensors` (name → (dtype name, array)) to `path` atomically; the bytes written.

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
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # safetensors aligns the data to 8 bytes
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{os.urandom(4).hex()}{TEMPORARY}")
    try:
        with open(temporary, "wb") as out:
            out.write(struct.pack("<Q", len(encoded)))
            out.write(encoded)
            for _, array in tensors.values():
                out.write(memoryview(np.ascontiguousarray(array)).cast("B"))
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return 8 + len(encoded) + offset


def read_block(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    """The tensors of the block at `path`, checked against its checksum.

    Raises FileNotFoundError when it is gone (another gateway evicted it: a miss) and
    `CorruptBlock` when it is there but damaged.
    """
    data = path.read_bytes()
    try:
        (length,) = struct.unpack_from("<Q", data)
        header = json.loads(data[8 : 8 + length])
        metadata = header.pop("__metadata__")
        if metadata.get("format") != FORMAT:
            raise CorruptBlock(f"format {metadata.get('format')!r}")
        body = memoryview(data)[8 + length :]
        tensors = {}
        for name, entry in header.items():
            start, end = entry["data_offsets"]
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
    except CorruptBlock:
        raise
    except (struct.error, ValueError, KeyError, TypeError, AttributeError) as error:
        raise CorruptBlock(f"unreadable: {type(error).__name__}") from None
