"""A LoRA or DoRA adapter directory read without loading it: which format (mlx-lm's, as
`mlx_lm.lora` writes it, or PEFT's), its kind, rank and scale, and the shapes of its
low-rank matrices by the base-model module each adapts, from the safetensors header alone.
`gateway check` reads it (gateway/control/adapter_check.py) and the text engine loads the
tensors it names (engines/llm/adapters.py)."""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

# The files of each format: mlx-lm's own, then PEFT's.
MLX_LM_WEIGHTS = "adapters.safetensors"
PEFT_WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"
PEFT_PREFIX = "base_model.model."


class AdapterError(ValueError):
    """What is wrong with an adapter directory, in words that name the file."""


@dataclass(frozen=True)
class AdapterModule:
    """One adapted linear layer: the tensors' names in the file and their shapes as the
    text engine holds them: `a` (in, rank), `b` (rank, out), DoRA's magnitude `m` (out,)."""

    a_name: str
    b_name: str
    m_name: str | None
    inputs: int
    outputs: int
    rank: int
    transposed: bool  # PEFT keeps A as (rank, in) and B as (out, rank)


@dataclass(frozen=True)
class AdapterFiles:
    path: Path
    weights: Path
    format: str  # "mlx-lm" | "peft"
    kind: str  # "lora" | "dora"
    rank: int
    scale: float  # the adapter's own: mlx-lm's `scale`, PEFT's lora_alpha / r
    modules: dict[str, AdapterModule]  # by the base model's module path
    nbytes: int  # the tensors' bytes as stored


def read_adapter(path: Path) -> AdapterFiles:
    """The adapter in `path`, or `AdapterError` saying what is missing or inconsistent."""
    if not path.is_dir():
        raise AdapterError(f"{path} is not a directory (an adapter is {CONFIG} and its weights)")
    config_file = path / CONFIG
    if not config_file.is_file():
        raise AdapterError(f"{path} has no {CONFIG}")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AdapterError(f"{config_file} is not readable JSON: {exc}") from None
    if not isinstance(config, dict):
        raise AdapterError(f"{config_file} is not a JSON object")
    if (path / MLX_LM_WEIGHTS).is_file():
        return _mlx_lm(path, config)
    if (path / PEFT_WEIGHTS).is_file():
        return _peft(path, config)
    raise AdapterError(f"{path} has neither {MLX_LM_WEIGHTS} (mlx-lm) nor {PEFT_WEIGHTS} (PEFT)")


def safetensors_shapes(file: Path) -> dict[str, tuple[list[int], str]]:
    """Each tensor's shape and dtype from a safetensors file's header."""
    try:
        with file.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > 100_000_000:
                raise AdapterError(f"{file} is not a safetensors file (header of {length} bytes)")
            header = json.loads(f.read(length))
    except (OSError, ValueError, struct.error) as exc:
        raise AdapterError(f"{file} is not a readable safetensors file: {exc}") from None
    return {
        name: (list(entry["shape"]), entry["dtype"])
        for name, entry in header.items()
        if name != "__metadata__"
    }


ITEM_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}


def _sized(file: Path, tensors: dict) -> int:
    total = 0
    for name, (shape, dtype) in tensors.items():
        if dtype not in ITEM_BYTES:
            raise AdapterError(f"{file}: tensor {name!r} is {dtype}, not a float")
        total += math.prod(shape) * ITEM_BYTES[dtype]
    return total


def _mlx_lm(path: Path, config: dict) -> AdapterFiles:
    weights = path / MLX_LM_WEIGHTS
    kind = config.get("fine_tune_type", "lora")
    if kind not in ("lora", "dora"):
        raise AdapterError(
            f"{path / CONFIG}: fine_tune_type {kind!r} is not an adapter (lora or dora)"
        )
    params = config.get("lora_parameters") or {}
    rank, scale = params.get("rank"), params.get("scale")
    if not isinstance(rank, int) or rank < 1:
        raise AdapterError(f"{path / CONFIG}: lora_parameters.rank must be a positive integer")
    if not isinstance(scale, (int, float)):
        raise AdapterError(f"{path / CONFIG}: lora_parameters.scale must be a number")
    tensors = safetensors_shapes(weights)
    modules = {}
    for name, (shape, _) in tensors.items():
        if not name.endswith(".lora_a"):
            continue
        module = name.removesuffix(".lora_a")
        b = tensors.get(f"{module}.lora_b")
        m_name = f"{module}.m" if kind == "dora" else None
        if b is None or len(shape) != 2 or len(b[0]) != 2:
            raise AdapterError(f"{weights}: {module} has lora_a but no 2-d lora_b")
        if m_name is not None and m_name not in tensors:
            raise AdapterError(f"{weights}: {module} is DoRA without its magnitude {m_name!r}")
        modules[module] = _checked(weights, module, shape, b[0], rank, False, m_name)
    return _made(path, weights, "mlx-lm", kind, rank, float(scale), modules, tensors)


def _peft(path: Path, config: dict) -> AdapterFiles:
    weights = path / PEFT_WEIGHTS
    if config.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{path / CONFIG}: peft_type {config.get('peft_type')!r} is not LORA")
    rank, alpha = config.get("r"), config.get("lora_alpha", config.get("r"))
    if not isinstance(rank, int) or rank < 1:
        raise AdapterError(f"{path / CONFIG}: r must be a positive integer")
    if not isinstance(alpha, (int, float)):
        raise AdapterError(f"{path / CONFIG}: lora_alpha must be a number")
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise AdapterError(f"{path / CONFIG}: rank_pattern and alpha_pattern are not supported")
    scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    kind = "dora" if config.get("use_dora") else "lora"
    tensors = safetensors_shapes(weights)
    modules = {}
    for name, (shape, _) in tensors.items():
        if not name.endswith(".lora_A.weight"):
            continue
        stem = name.removesuffix(".lora_A.weight")
        b = tensors.get(f"{stem}.lora_B.weight")
        m_name = f"{stem}.lora_magnitude_vector" if kind == "dora" else None
        if m_name is not None and m_name not in tensors:
            m_name = f"{m_name}.weight"  # PEFT's later name of it
        module = stem.removeprefix(PEFT_PREFIX)
        if b is None or len(shape) != 2 or len(b[0]) != 2:
            raise AdapterError(f"{weights}: {module} has lora_A but no 2-d lora_B")
        if m_name is not None and m_name not in tensors:
            raise AdapterError(f"{weights}: {module} is DoRA without its magnitude vector")
        a_shape, b_shape = [shape[1], shape[0]], [b[0][1], b[0][0]]
        modules[module] = _checked(weights, module, a_shape, b_shape, rank, True, m_name, stem)
    return _made(path, weights, "peft", kind, rank, float(scale), modules, tensors)


def _checked(weights, module, a_shape, b_shape, rank, transposed, m_name, stem=None):
    """One module's shapes (a: in x rank, b: rank x out), its rank the declared one."""
    if a_shape[1] != rank or b_shape[0] != rank:
        raise AdapterError(
            f"{weights}: {module} has rank {a_shape[1]}x{b_shape[0]}, the config says {rank}"
        )
    stem = module if stem is None else stem
    a_name, b_name = (
        (f"{stem}.lora_A.weight", f"{stem}.lora_B.weight")
        if transposed
        else (f"{stem}.lora_a", f"{stem}.lora_b")
    )
    return AdapterModule(a_name, b_name, m_name, a_shape[0], b_shape[1], rank, transposed)


def _made(path, weights, fmt, kind, rank, scale, modules, tensors) -> AdapterFiles:
    if not modules:
        raise AdapterError(f"{weights} holds no LoRA matrices")
    return AdapterFiles(path, weights, fmt, kind, rank, scale, modules, _sized(weights, tensors))


def check_fits(adapter: AdapterFiles, shapes: dict[str, tuple[int, int]]) -> None:
    """`AdapterError` unless every module the adapter names is a linear layer of the base
    of its shape: `shapes` maps the base's linear layers to (in, out)."""
    for module, found in adapter.modules.items():
        if module not in shapes:
            near = sorted(shapes)[:3]
            raise AdapterError(
                f"{adapter.weights}: target module {module!r} is no linear layer of the base "
                f"model (its layers are named like {', '.join(near)})"
            )
        inputs, outputs = shapes[module]
        if (found.inputs, found.outputs) != (inputs, outputs):
            raise AdapterError(
                f"{adapter.weights}: {module} adapts {found.inputs} -> {found.outputs}, the "
                f"base's layer is {inputs} -> {outputs}"
            )
