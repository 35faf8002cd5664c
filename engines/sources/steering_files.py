"""A steering vector file read into per-layer directions, without MLX: llama.cpp's
control-vector GGUF (`general.architecture` `controlvector`, F32 or F16 tensors
`direction.<layer>` of shape [hidden], as `cvector-generator` and repeng's `export_gguf`
write it) or a safetensors file of the same keys. `gateway check` reads it
(gateway/control/steering_check.py); the text engine adds the directions to the residual
stream (engines/llm/steering.py), and checks them against the model it loads."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engines.errors import GGUFFormatError
from engines.sources.gguf_header import read_gguf_header

DIRECTION = re.compile(r"direction\.(\d+)")
CONTROL_VECTOR = "controlvector"  # llama.cpp's general.architecture for these files
MAX_BYTES = 1 << 30  # a direction per layer of a large model is some MB; more is no vector
_SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None}
_GGUF_DTYPES = {"F32": np.float32, "F16": np.float16}


class SteeringError(ValueError):
    """What is wrong with a steering vector file, in words that name it."""


@dataclass(frozen=True)
class SteeringFile:
    path: Path
    format: str  # "gguf" | "safetensors"
    sha256: str
    hidden: int
    vectors: dict[int, np.ndarray]  # decoder layer -> its direction (float32, [hidden])

    def chosen(self, layers: list[int] | None) -> list[int]:
        """The layers a config's `layers` names (all the file's when None), each with a
        vector here, or `SteeringError` naming the ones without."""
        if layers is None:
            return sorted(self.vectors)
        missing = [layer for layer in layers if layer not in self.vectors]
        if missing:
            held = ", ".join(map(str, sorted(self.vectors)))
            raise SteeringError(
                f"{self.path} has no vector for layer(s) {', '.join(map(str, missing))} "
                f"(it holds layers {held})"
            )
        return sorted(set(layers))


def resolve(vector: str, base_dir: Path | None) -> Path:
    path = Path(vector).expanduser()
    return base_dir / path if not path.is_absolute() and base_dir is not None else path


def read_steering(path: Path) -> SteeringFile:
    """The directions in `path` by layer, or `SteeringError` saying what is wrong."""
    if not path.is_file():
        raise SteeringError(f"{path} is not a file (a steering vector is a .gguf or .safetensors)")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise SteeringError(f"{path} is {size} bytes: too large for a steering vector")
    data = path.read_bytes()
    if data[:4] == b"GGUF":
        fmt, raw = "gguf", _gguf(path, data)
    else:
        fmt, raw = "safetensors", _safetensors(path, data)
    vectors = {}
    for name, array in raw.items():
        found = DIRECTION.fullmatch(name)
        if found is None:
            raise SteeringError(
                f"{path}: tensor {name!r} is not a direction (names are direction.<layer>)"
            )
        if array.ndim != 1:
            raise SteeringError(f"{path}: {name} has shape {list(array.shape)}, not [hidden]")
        vectors[int(found.group(1))] = array.astype(np.float32)
    if not vectors:
        raise SteeringError(f"{path} holds no direction.<layer> tensors")
    sizes = {v.shape[0] for v in vectors.values()}
    if len(sizes) != 1:
        raise SteeringError(f"{path}: its directions differ in size ({sorted(sizes)})")
    if not all(np.isfinite(v).all() for v in vectors.values()):
        raise SteeringError(f"{path}: a direction holds NaN or infinity")
    return SteeringFile(path, fmt, hashlib.sha256(data).hexdigest(), sizes.pop(), vectors)


def _gguf(path: Path, data: bytes) -> dict[str, np.ndarray]:
    try:
        header = read_gguf_header(path)
    except GGUFFormatError as error:
        raise SteeringError(f"{path}: {error}") from None
    arch = header.metadata.get("general.architecture")
    if arch is not None and arch != CONTROL_VECTOR:
        raise SteeringError(
            f"{path}: general.architecture is {arch!r}, not {CONTROL_VECTOR!r} (a model, "
            "not a control vector?)"
        )
    tensors = {}
    for tensor in header.tensors:
        dtype = _GGUF_DTYPES.get(tensor.kind)
        if dtype is None:
            raise SteeringError(f"{path}: tensor {tensor.name!r} is {tensor.kind}, not F32 or F16")
        count = int(np.prod(tensor.shape))
        tensors[tensor.name] = np.frombuffer(
            data, dtype=dtype, count=count, offset=tensor.offset
        ).reshape(tensor.shape)
    return tensors


def _safetensors(path: Path, data: bytes) -> dict[str, np.ndarray]:
    try:
        (length,) = struct.unpack_from("<Q", data)
        if length > len(data) - 8:
            raise ValueError(f"header of {length} bytes in a file of {len(data)}")
        header = json.loads(data[8 : 8 + length])
    except (ValueError, struct.error) as exc:
        raise SteeringError(
            f"{path} is neither a GGUF nor a readable safetensors file: {exc}"
        ) from None
    start = 8 + length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise SteeringError(f"{path}: tensor {name!r} has a malformed header entry") from None
        if dtype not in _SAFETENSORS_DTYPES:
            raise SteeringError(f"{path}: tensor {name!r} is {dtype}, not a float")
        if not 0 <= begin <= end <= len(data) - start:
            raise SteeringError(f"{path}: tensor {name!r} lies outside the file")
        raw = data[start + begin : start + end]
        if dtype == "BF16":  # bfloat16 is the top half of a float32
            array = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(raw, _SAFETENSORS_DTYPES[dtype])
        if array.size != int(np.prod(shape)):
            raise SteeringError(f"{path}: tensor {name!r} holds {array.size} values, not {shape}")
        tensors[name] = array.reshape(shape)
    return tensors


def check_fits(steering: SteeringFile, layers: list[int], hidden: int, n_layers: int) -> None:
    """`SteeringError` unless the vectors are of the model's hidden size and every chosen
    layer is one of its decoder layers."""
    if steering.hidden != hidden:
        raise SteeringError(
            f"{steering.path}: its directions have {steering.hidden} values, the model's "
            f"hidden size is {hidden}"
        )
    beyond = [layer for layer in layers if layer >= n_layers]
    if beyond:
        raise SteeringError(
            f"layer(s) {', '.join(map(str, beyond))} out of range: the model has {n_layers} "
            f"decoder layers (0..{n_layers - 1})"
        )


def source_shape(path: Path) -> tuple[int, int] | None:
    """The hidden size and decoder layers a model source declares (a directory's
    config.json, a GGUF's `<arch>.embedding_length` and `.block_count`), without loading
    it; None where it says neither (the load checks the vector against the model then)."""
    try:
        if path.is_dir():
            config = json.loads((path / "config.json").read_text(encoding="utf-8"))
            config = config.get("text_config", config) if isinstance(config, dict) else {}
            hidden, layers = config.get("hidden_size"), config.get("num_hidden_layers")
        else:
            metadata = read_gguf_header(path).metadata
            arch = metadata.get("general.architecture")
            hidden = metadata.get(f"{arch}.embedding_length")
            layers = metadata.get(f"{arch}.block_count")
    except (OSError, ValueError, GGUFFormatError):
        return None
    if isinstance(hidden, int) and isinstance(layers, int):
        return hidden, layers
    return None
