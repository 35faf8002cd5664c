"""The GGUF header, read in pure Python with every length and offset checked.

MLX reads GGUF through gguflib, which trusts the file: a truncated or corrupt one crashes
the process instead of raising. `read_gguf_header` walks the whole header with bounded
reads, so only a file that passes ever reaches MLX.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engines.errors import GGUFFormatError

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q"}
_SCALARS |= {11: "<q"}
_STRING, _ARRAY, _FLOAT64 = 8, 9, 12
# Tensor types MLX delivers as plain arrays or quantized triples: id -> (name, block, bytes).
_TENSOR_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    8: ("Q8_0", 32, 34),
}
_OTHER_TYPES = {6: "Q5_0", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K"}
_OTHER_TYPES |= {13: "Q5_K", 14: "Q6_K", 15: "Q8_K", 30: "BF16"}
BITS = {"Q4_0": 4, "Q4_1": 4, "Q8_0": 8}


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # MLX order (GGUF stores dimensions innermost first)
    kind: str  # "F32", "Q4_1", ...
    offset: int = 0  # where its data starts in the file, in bytes


@dataclass
class GGUFHeader:
    version: int
    metadata: dict[str, object] = field(default_factory=dict)  # scalars and strings only
    tensors: list[TensorInfo] = field(default_factory=list)


class _Reader:
    """Bounded reads over the mapped file: every length is checked against what is left."""

    def __init__(self, buf: mmap.mmap, size: int) -> None:
        self.buf, self.size, self.pos = buf, size, 0

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            left = self.size - self.pos
            raise GGUFFormatError(
                f"truncated or corrupt: {what} needs {n} bytes at offset "
                f"{self.pos}, only {left} left"
            )

    def unpack(self, fmt: str, what: str) -> object:
        n = struct.calcsize(fmt)
        self.need(n, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return value

    def string(self, what: str) -> str:
        n = self.unpack("<Q", what)
        self.need(n, what)
        start, self.pos = self.pos, self.pos + n
        try:  # MLX hands strings to Python, which raises on bad UTF-8 only after the load
            return self.buf[start : self.pos].decode()
        except UnicodeDecodeError:
            raise GGUFFormatError(f"corrupt: {what} at offset {start} is not UTF-8") from None

    def value(self, vtype: int, key: str, *, top: bool = True) -> object:
        if vtype == 6:  # float32: keep its shortest decimal (1e-05, not 9.99999974e-06)
            return float(str(np.float32(self.unpack("<f", key))))
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype], key)
        if vtype == _STRING:
            return self.string(key)
        if vtype == _FLOAT64:
            # MLX 0.32 segfaults on float64 metadata (scalar or array), measured.
            raise GGUFFormatError(f"metadata {key!r} is float64, which MLX cannot read")
        if vtype == _ARRAY and top:
            etype, count = self.unpack("<I", key), self.unpack("<Q", key)
            if etype in (_ARRAY, _FLOAT64):
                raise GGUFFormatError(f"metadata {key!r}: unsupported array element type {etype}")
            if count > min(self.size - self.pos, 2**31 - 1):
                raise GGUFFormatError(f"corrupt: metadata {key!r} claims {count} elements")
            if etype in _SCALARS:
                n = count * struct.calcsize(_SCALARS[etype])
                self.need(n, f"metadata {key!r}")
                self.pos += n
            else:
                for _ in range(count):
                    self.value(etype, key, top=False)
            return None
        raise GGUFFormatError(f"corrupt: metadata {key!r} has unknown value type {vtype}")


def read_gguf_header(path: Path) -> GGUFHeader:
    """Validate a GGUF file's header and tensor table; raise GGUFFormatError saying why not."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            raise GGUFFormatError(f"not a GGUF file: {size} bytes, too short for a header")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _walk(_Reader(buf, size))


def _walk(r: _Reader) -> GGUFHeader:
    if r.buf[:4] != b"GGUF":
        raise GGUFFormatError(f"not a GGUF file: magic is {bytes(r.buf[:4])!r}, expected b'GGUF'")
    r.pos = 4
    version, n_tensors, n_kv = (r.unpack(f, "header") for f in ("<I", "<Q", "<Q"))
    if version not in (2, 3):
        raise GGUFFormatError(f"unsupported GGUF version {version} (2 and 3 are read)")
    # A tensor entry takes at least 32 bytes and a metadata entry 13: cheap bounds on counts.
    if n_tensors * 32 > r.size or n_kv * 13 > r.size:
        raise GGUFFormatError(
            f"corrupt: header claims {n_tensors} tensors and {n_kv} metadata "
            f"entries, more than {r.size} bytes can hold"
        )
    header = GGUFHeader(version)
    for _ in range(n_kv):
        key = r.string("metadata key")
        vtype = r.unpack("<I", f"type of {key!r}")
        if key in header.metadata:
            raise GGUFFormatError(f"corrupt: metadata key {key!r} appears twice")
        header.metadata[key] = r.value(vtype, key)
        if key == "general.alignment" and vtype != 4:  # gguflib only honours a uint32 one
            raise GGUFFormatError("corrupt: general.alignment is not a uint32")
    alignment = header.metadata.get("general.alignment", 32)
    if not 0 < alignment <= 1 << 16 or alignment % 8:  # 0 would divide by zero in gguflib
        raise GGUFFormatError(f"corrupt: general.alignment is {alignment}")
    placed = []
    for _ in range(n_tensors):
        name = r.string("tensor name")
        ndim = r.unpack("<I", f"tensor {name!r}")
        if not 1 <= ndim <= 4:
            raise GGUFFormatError(f"corrupt: tensor {name!r} has {ndim} dimensions")
        dims = [r.unpack("<Q", f"tensor {name!r}") for _ in range(ndim)]
        ttype, offset = r.unpack("<I", f"tensor {name!r}"), r.unpack("<Q", f"tensor {name!r}")
        if ttype not in _TENSOR_TYPES:
            kind = _OTHER_TYPES.get(ttype, f"type {ttype}")
            raise GGUFFormatError(
                f"tensor {name!r} is {kind}; supported: F32, F16, Q4_0, Q4_1, Q8_0"
            )
        kind, block, nbytes = _TENSOR_TYPES[ttype]
        if not all(0 < d < 2**31 for d in dims) or dims[0] % block or offset % alignment:
            raise GGUFFormatError(f"corrupt: tensor {name!r} has shape {dims}, offset {offset}")
        count = 1
        for d in dims:
            count *= d
        placed.append((name, offset, count // block * nbytes))
        header.tensors.append(TensorInfo(name, tuple(reversed(dims)), kind, offset))
    data_start = r.pos + (-r.pos) % alignment
    header.tensors = [
        TensorInfo(t.name, t.shape, t.kind, data_start + t.offset) for t in header.tensors
    ]
    for name, offset, nbytes in placed:
        if data_start + offset + nbytes > r.size:
            raise GGUFFormatError(
                f"truncated: data of tensor {name!r} ends at byte "
                f"{data_start + offset + nbytes}, file has {r.size}"
            )
    return header
