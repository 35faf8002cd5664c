"""`gateway check` on `steering:` (a model's and an adapter's): a missing or unreadable
file, layers without a vector, a hidden size or layers the source's config.json says the
model has not, each at `file:line:col` naming `steering`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from engines.errors import ConfigInvalid
from gateway.control.config import load_config, validate_config
from tests.gateway.control.test_adapter_check import write_adapter

HIDDEN, LAYERS = 64, 4


def write_vector(path, hidden: int = HIDDEN, layers=(1, 2)) -> None:
    save_file({f"direction.{i}": np.ones(hidden, np.float32) for i in layers}, str(path))


def config_file(tmp_path, steering: str, adapter_steering: str | None = None):
    """A base model (a directory whose config.json says its shape) steered by `steering`,
    with one adapter steered by `adapter_steering`."""
    path = tmp_path / "models.yaml"
    text = f"models:\n  - id: base\n    source: ./base\n    steering: {steering}\n"
    if adapter_steering is not None:
        write_adapter(tmp_path / "tone")
        text += f"    adapters:\n      - {{id: tone, path: tone, steering: {adapter_steering}}}\n"
    path.write_text(text)
    (tmp_path / "base").mkdir()
    shape = {"hidden_size": HIDDEN, "num_hidden_layers": LAYERS}
    (tmp_path / "base" / "config.json").write_text(json.dumps(shape))
    return path


def errors(path) -> list[str]:
    with pytest.raises(ConfigInvalid) as info:
        validate_config(path)
    return [e for e in info.value.errors if "steering" in e]


def test_a_fitting_vector_passes(tmp_path):
    write_vector(tmp_path / "v.safetensors")
    path = config_file(tmp_path, "{vector: v.safetensors, layers: [2], scale: 4}")
    config = load_config(path, read_files=True)
    assert config.models[0].steering.layers == [2]


def test_a_missing_file_is_named_at_its_vector(tmp_path):
    path = config_file(tmp_path, "{vector: nowhere.gguf}")
    (error,) = errors(path)
    assert error.startswith(f"{path}:4:24: models[0].steering.vector: model 'base': `steering`")
    assert "nowhere.gguf is not a file" in error


def test_layers_without_a_vector_and_out_of_range_are_named(tmp_path):
    write_vector(tmp_path / "v.safetensors", layers=(1, 2, 9))
    path = config_file(tmp_path, "{vector: v.safetensors, layers: [3]}")
    (error,) = errors(path)
    assert "models[0].steering.layers" in error and "no vector for layer(s) 3" in error
    (tmp_path / "models.yaml").write_text(path.read_text().replace("layers: [3]", "layers: [9]"))
    (error,) = errors(path)
    assert "models[0].steering.layers" in error
    assert "layer(s) 9 out of range: the model has 4 decoder layers" in error


def test_an_adapters_vector_of_another_hidden_size_is_named(tmp_path):
    write_vector(tmp_path / "v.safetensors")
    write_vector(tmp_path / "wide.safetensors", hidden=128)
    path = config_file(tmp_path, "{vector: v.safetensors}", "{vector: wide.safetensors}")
    (error,) = errors(path)
    assert "models[0].adapters[0].steering.vector: model 'base': adapter 'tone'" in error
    assert "have 128 values, the model's hidden size is 64" in error


def test_steering_beside_isolation_is_refused(tmp_path):
    write_vector(tmp_path / "v.safetensors")
    path = config_file(tmp_path, "{vector: v.safetensors}")
    path.write_text(path.read_text() + "    isolation: process\n")
    assert any("`steering` with `isolation: process`" in e for e in errors(path))
