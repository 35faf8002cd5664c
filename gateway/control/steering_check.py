"""`gateway check` on `steering:` (a model's and each adapter's; every reload too): the
vector file there and readable (llama.cpp's control-vector GGUF or a safetensors of
`direction.<layer>`), a vector for every layer named, and, where the model's source says
its shape without loading (a directory's config.json, a GGUF's metadata), of its hidden
size and within its decoder layers. Each error at `file:line:col` naming `steering`; the
load checks the same against the model itself (engines/llm/steering.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engines.errors import SourceError
from engines.sources.steering_files import (
    SteeringError,
    check_fits,
    read_steering,
    resolve,
    source_shape,
)
from gateway.control.yaml_source import Source


def check_steering(models: list[Any], src: Source, base_dir: Path | None) -> None:
    """Read only given `base_dir` (`gateway check`, a reload), in a config otherwise valid."""
    if base_dir is None:
        return
    for i, model in enumerate(models):
        if not isinstance(model, dict):
            continue
        mid = model.get("id")
        steered = [(("models", i, "steering"), f"model {mid!r}", model.get("steering"))]
        for j, adapter in enumerate(model.get("adapters") or []):
            if isinstance(adapter, dict):
                who = f"model {mid!r}: adapter {adapter.get('id')!r}"
                steered.append(
                    (("models", i, "adapters", j, "steering"), who, adapter.get("steering"))
                )
        if all(config is None for *_, config in steered):
            continue
        shape = _shape(model, base_dir)
        for where, who, config in steered:
            if isinstance(config, dict):
                _check_one(where, who, config, shape, src, base_dir)


def _check_one(where, who: str, config: dict, shape, src: Source, base_dir: Path) -> None:
    try:
        found = read_steering(resolve(config["vector"], base_dir))
    except SteeringError as error:
        src.at((*where, "vector"), f"{who}: `steering`: {error}")
        return
    try:
        layers = found.chosen(config.get("layers"))
    except SteeringError as error:
        src.at((*where, "layers"), f"{who}: `steering`: {error}")
        return
    if shape is None:
        return
    try:
        check_fits(found, layers, *shape)
    except SteeringError as error:
        key = "vector" if found.hidden != shape[0] else "layers"
        src.at((*where, key), f"{who}: `steering`: {error}")


def _shape(model: dict, base_dir: Path) -> tuple[int, int] | None:
    """The model's (hidden size, decoder layers) from its source, if it says them."""
    from engines.sources.resolve import check_source

    source = model.get("source")
    if not isinstance(source, str):
        return None
    if ":" not in source:  # a path: read as it is (a bad source is its own error)
        return source_shape(resolve(source, base_dir))
    try:
        path = check_source(str(model.get("id")), source, base_dir=base_dir)
    except (SourceError, OSError, ValueError):
        return None  # reported as the source's own error
    return source_shape(path)
