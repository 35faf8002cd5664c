"""Read a CTranslate2 `model.bin`: the variables (name -> numpy array) and their aliases.

The layout (CTranslate2's `models/model.cc`, binary versions 3 to 6): a uint32 version, the
spec's name and revision, then each variable as a name, rank, dims, dtype and raw bytes,
then aliases (a name for another variable's bytes, e.g. tied embeddings). Everything is
little-endian; strings are a uint16 length then that many bytes ending in NUL. Reading it
here keeps CTranslate2 itself out of the runtime.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

# CTranslate2's DataType enum, in order (include/ctranslate2/types.h).
_DTYPES = {
    0: np.float32,
    1: np.int8,
    2: np.int16,
    3: np.int32,
    4: "float16",
    5: "bfloat16",
}
SUPPORTED_VERSIONS = range(3, 7)


class CT2FormatError(ValueError):
    """The file is not a CTranslate2 model this reader understands; the message says why."""


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data, self.at = data, 0

    def take(self, n: int) -> memoryview:
        if self.at + n > len(self.data):
            raise CT2FormatError(f"truncated at byte {self.at} (wanted {n} more)")
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return struct.unpack("<H", self.take(2))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def string(self) -> str:
        raw = bytes(self.take(self.u16()))
        return raw.rstrip(b"\0").decode("utf-8")


def read_ct2(path: Path) -> tuple[str, dict[str, np.ndarray]]:
    """The spec's name and every variable (aliases resolved) of the model.bin at `path`."""
    data = memoryview(path.read_bytes())
    r = _Reader(data)
    version = r.u32()
    if version not in SUPPORTED_VERSIONS:
        raise CT2FormatError(f"binary version {version}; this reader knows 3 to 6")
    spec = r.string()
    r.u32()  # the spec's revision: the variables' names say what we need
    variables: dict[str, np.ndarray] = {}
    for _ in range(r.u32()):
        name = r.string()
        dims = [r.u32() for _ in range(r.u8())]
        code = r.u8()
        if code not in _DTYPES:
            raise CT2FormatError(f"variable {name!r}: unknown data type {code}")
        size = r.u32()
        raw = r.take(size)
        dtype = _DTYPES[code]
        if dtype == "bfloat16":  # numpy has none: widen the 16 bits to float32's top half
            array = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, dtype)
        if array.size != int(np.prod(dims)) if dims else array.size != 1:
            raise CT2FormatError(f"variable {name!r}: {size} bytes do not fill dims {dims}")
        variables[name] = array.reshape(dims)
    if r.at < len(data):
        for _ in range(r.u32()):
            alias, target = r.string(), r.string()
            if target in variables:
                variables[alias] = variables[target]
    return spec, variables
