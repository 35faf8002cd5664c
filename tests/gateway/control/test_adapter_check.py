"""`gateway check` on `adapters:`: names clash with no model or other adapter, and each
directory reads as an adapter, every error at `file:line:col` naming `adapters`."""

from __future__ import annotations

import json

import pytest

from engines.errors import ConfigInvalid
from gateway.control.config import load_config, validate_config


def write_adapter(directory, rank: int = 2) -> None:
    import mlx.core as mx

    directory.mkdir()
    stem = "model.layers.0.self_attn.q_proj"
    weights = {f"{stem}.lora_a": mx.zeros((64, rank)), f"{stem}.lora_b": mx.zeros((rank, 64))}
    mx.save_safetensors(str(directory / "adapters.safetensors"), weights)
    params = {"rank": rank, "scale": 2.0, "keys": ["self_attn.q_proj"]}
    config = {"fine_tune_type": "lora", "num_layers": 1, "lora_parameters": params}
    (directory / "adapter_config.json").write_text(json.dumps(config))


def config_file(tmp_path, *adapters: str):
    """A base model with `adapters` (one flow mapping each), its source a directory."""
    entries = "".join(f"\n      - {entry}" for entry in adapters)
    path = tmp_path / "models.yaml"
    path.write_text(
        "models:\n  - id: base\n    source: ./base\n    aliases: [base-alias]\n"
        f"    adapters:{entries}\n"
    )
    (tmp_path / "base").mkdir(exist_ok=True)
    (tmp_path / "base" / "config.json").write_text("{}")
    return path


def errors(path) -> list[str]:
    with pytest.raises(ConfigInvalid) as info:
        validate_config(path)
    return info.value.errors


def test_a_readable_adapter_passes(tmp_path):
    write_adapter(tmp_path / "tone")
    path = config_file(tmp_path, "{id: tone, path: tone, aliases: [base-tone]}")
    config = load_config(path, read_files=True)
    assert [a.id for a in config.models[0].adapters] == ["tone"]


def test_a_missing_directory_is_named_at_its_path(tmp_path):
    path = config_file(tmp_path, "{id: tone, path: nowhere}")
    (error,) = [e for e in errors(path) if "adapters" in e]
    assert error.startswith(f"{path}:6:26: ")  # at the path itself
    assert "models[0].adapters[0].path: model 'base': adapter 'tone'" in error
    assert "nowhere is not a directory" in error
    load_config(path)  # without reading files (a parse alone) the names are fine


def test_a_rank_the_matrices_do_not_have_is_refused(tmp_path):
    write_adapter(tmp_path / "tone")
    config = json.loads((tmp_path / "tone" / "adapter_config.json").read_text())
    config["lora_parameters"]["rank"] = 8
    (tmp_path / "tone" / "adapter_config.json").write_text(json.dumps(config))
    path = config_file(tmp_path, "{id: tone, path: tone}")
    (error,) = [e for e in errors(path) if "adapters" in e]
    assert "adapters[0].path" in error and "rank 2x2, the config says 8" in error


def test_adapter_names_clash_with_no_model_or_adapter(tmp_path):
    write_adapter(tmp_path / "tone")
    path = config_file(
        tmp_path, "{id: base-alias, path: tone}", "{id: tone, path: tone, aliases: [tone]}"
    )
    with pytest.raises(ConfigInvalid) as info:
        load_config(path)
    found = "\n".join(info.value.errors)
    assert "adapters[0].id: model 'base': adapter name 'base-alias' is already a name of " in found
    assert "model 'base'" in found
    assert "adapters[1].aliases[0]: model 'base': adapter name 'tone' is already" in found


def test_the_shipped_example_passes_gateway_check():
    from conftest import REPO

    from gateway.control.config import summarize

    config = validate_config(REPO / "configs" / "examples" / "adapters.yaml")
    adapters = config.models[0].adapters
    assert [a.id for a in adapters] == ["smollm2-concise", "smollm2-playful"]
    assert "adapters=smollm2-concise,smollm2-playful" in summarize(config)[0]
