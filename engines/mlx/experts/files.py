"""Where each expert's bytes lie in a model's safetensors files, and reading one of them by
offset: a stacked expert tensor `[experts, ...]` holds expert `e` as one contiguous run of
bytes, so an expert is one `pread` per tensor, never the file mapped whole.

A file that is missing, truncated or whose header does not parse is named in the error."""

from __future__ import annotations

import json
import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from engines.errors import SourceError

# Threads a model's expert reads run on (a step's misses read together).
READ_THREADS = 4

# safetensors dtype names -> (numpy dtype to read as, mlx dtype name to view it as)
DTYPES = {
    "F32": ("float32", "float32"),
    "F16": ("float16", "float16"),
    "BF16": ("uint16", "bfloat16"),  # numpy has no bfloat16: read the bits, view them in mlx
    "U32": ("uint32", "uint32"),
    "I32": ("int32", "int32"),
    "U8": ("uint8", "uint8"),
}


@dataclass(frozen=True)
class TensorRecord:
    """One stacked expert tensor in its file: expert `e` is `stride` bytes at
    `start + e * stride`, of shape `shape[1:]`."""

    name: str
    file: Path
    dtype: str  # safetensors' name
    shape: tuple[int, ...]
    start: int  # absolute offset of expert 0
    stride: int  # bytes of one expert

    @property
    def experts(self) -> int:
        return self.shape[0]


def read_header(model_id: str, file: Path) -> tuple[dict, int]:
    """The JSON header of a safetensors file and the offset its data starts at."""
    try:
        with open(file, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise ValueError("shorter than a safetensors header")
            (size,) = struct.unpack("<Q", head)
            header = json.loads(handle.read(size))
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except FileNotFoundError:
        raise SourceError(model_id, str(file), "expert file not found") from None
    except (OSError, ValueError) as error:
        raise SourceError(model_id, str(file), f"expert file unreadable: {error}") from None
    return header, 8 + size


def expert_records(model_id: str, model_dir: Path, names: set[str]) -> dict[str, TensorRecord]:
    """The records of the tensors `names` (the model's stacked expert parameters) across the
    directory's safetensors files; a tensor none of them holds, or a file shorter than the
    tensors its header promises, is refused by name."""
    found: dict[str, TensorRecord] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        header, data = read_header(model_id, file)
        size = file.stat().st_size
        for name, entry in header.items():
            if name not in names:
                continue
            begin, end = entry["data_offsets"]
            if data + end > size:
                raise SourceError(
                    model_id,
                    str(file),
                    f"expert file truncated: {name} ends at byte {data + end}, the file has {size}",
                )
            if entry["dtype"] not in DTYPES:
                raise SourceError(model_id, str(file), f"{name}: dtype {entry['dtype']} unread")
            shape = tuple(entry["shape"])
            found[name] = TensorRecord(
                name, file, entry["dtype"], shape, data + begin, (end - begin) // shape[0]
            )
    missing = sorted(names - set(found))
    if missing:
        raise SourceError(
            model_id,
            str(model_dir),
            f"no safetensors file holds the stacked expert tensor {missing[0]} "
            f"({len(missing)} missing); `experts:` reads experts stacked as mlx-lm saves them "
            "(mlx_lm.convert writes them so)",
        )
    return found


class ExpertReader:
    """Reads experts by offset from the files, one open descriptor per file (pread is safe
    across threads); counts the bytes read."""

    def __init__(self, model_id: str) -> None:
        self.model_id = model_id
        self._fds: dict[Path, int] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # started at the first step's misses
        self.bytes_read = 0

    def _fd(self, file: Path) -> int:
        with self._lock:
            fd = self._fds.get(file)
            if fd is None:
                try:
                    fd = os.open(file, os.O_RDONLY)
                except OSError as error:
                    raise SourceError(
                        self.model_id, str(file), f"expert file unreadable: {error.strerror}"
                    ) from None
                self._fds[file] = fd
            return fd

    def read(self, record: TensorRecord, expert: int):
        """Expert `expert` of `record` as an mlx array (a copy: the file is never mapped)."""
        return self.array(record, self.read_bytes(record, expert))

    def read_all(self, wanted: list[tuple[TensorRecord, int]]) -> list[bytes]:
        """The bytes of each (record, expert), read on the reader's threads together (a
        step's misses; on an SSD their latencies overlap); one alone is read here."""
        if len(wanted) == 1:
            return [self.read_bytes(*wanted[0])]
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="experts")
            pool = self._pool
        return list(pool.map(lambda job: self.read_bytes(*job), wanted))

    def read_bytes(self, record: TensorRecord, expert: int) -> bytes:
        try:
            raw = os.pread(
                self._fd(record.file), record.stride, record.start + expert * record.stride
            )
        except OSError as error:
            raise SourceError(
                self.model_id, str(record.file), f"expert file unreadable: {error.strerror}"
            ) from None
        if len(raw) != record.stride:
            raise SourceError(
                self.model_id,
                str(record.file),
                f"expert file truncated: {record.name} expert {expert} is short "
                f"({len(raw)} of {record.stride} bytes)",
            )
        with self._lock:
            self.bytes_read += len(raw)
        return raw

    def array(self, record: TensorRecord, raw: bytes):
        """One expert's bytes of `record` as an mlx array of its dtype and shape."""
        import mlx.core as mx
        import numpy as np

        numpy_dtype, mlx_dtype = DTYPES[record.dtype]
        values = np.frombuffer(raw, dtype=numpy_dtype).reshape(record.shape[1:])
        array = mx.array(values)
        if numpy_dtype != mlx_dtype:
            array = array.view(getattr(mx, mlx_dtype))
        return array

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


def stored_split(model_id: str, model_dir: Path) -> tuple[int, int, int]:
    """From the headers alone (nothing loaded): the bytes of the dense tensors, of the stacked
    expert tensors, and the experts a layer stacks. A stacked expert tensor is told by its
    name as mlx-lm saves it (`...switch_mlp...` or `...experts...`, three dimensions or more);
    the loaded model's own modules decide at load (`install_experts`), this only estimates."""
    dense = stacked = experts = 0
    for file in sorted(model_dir.glob("*.safetensors")):
        header, _ = read_header(model_id, file)
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            parts = name.split(".")
            if len(entry["shape"]) >= 3 and ("switch_mlp" in parts or "experts" in parts):
                stacked += end - begin
                experts = max(experts, entry["shape"][0])
            else:
                dense += end - begin
    return dense, stacked, experts


def quantized_config(model_dir: Path) -> bool:
    """Whether the directory's config.json says its weights are quantized (mlx_lm.convert)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("quantization"))
