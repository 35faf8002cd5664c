"""A PEFT-format adapter (`adapter_config.json` + `adapter_model.safetensors`, PEFT's key
names and (rank, in) / (out, rank) layouts, `lora_alpha / r` as its scale) answers as the
same matrices in mlx-lm's format do, and as mlx-lm's fused copy: LoRA and DoRA, alone and
in one batch with the mlx-lm slot and the base."""

from __future__ import annotations

import json

import pytest

from schemas.config import AdapterConfig
from tests.engines.llm.test_adapters import batched, fused, greedy, tiny_llama, write_adapter

PROMPTS = [[1, 5, 9, 33, 70], [2, 8, 8, 41]]
PEFT_PREFIX = "base_model.model."


def as_peft(mlx_dir, peft_dir):
    """mlx-lm's adapter rewritten as PEFT saves one: `base_model.model.<module>.lora_A.weight`
    (rank, in), `lora_B.weight` (out, rank), DoRA's `lora_magnitude_vector`; r and lora_alpha
    for mlx-lm's rank and scale."""
    import mlx.core as mx

    config = json.loads((mlx_dir / "adapter_config.json").read_text())
    params = config["lora_parameters"]
    tensors = {}
    for name, array in mx.load(str(mlx_dir / "adapters.safetensors")).items():
        module, _, kind = name.rpartition(".")
        stem = f"{PEFT_PREFIX}{module}"
        if kind == "lora_a":
            tensors[f"{stem}.lora_A.weight"] = array.T
        elif kind == "lora_b":
            tensors[f"{stem}.lora_B.weight"] = array.T
        elif kind == "m":
            tensors[f"{stem}.lora_magnitude_vector"] = array
    peft_dir.mkdir()
    mx.save_safetensors(str(peft_dir / "adapter_model.safetensors"), tensors)
    peft = {
        "peft_type": "LORA",
        "r": params["rank"],
        "lora_alpha": params["scale"] * params["rank"],
        "use_dora": config["fine_tune_type"] == "dora",
        "target_modules": sorted({k.split(".")[-3] for k in tensors}),
    }
    (peft_dir / "adapter_config.json").write_text(json.dumps(peft))
    return peft_dir


@pytest.mark.parametrize("dora", [False, True], ids=["lora", "dora"])
def test_a_peft_adapter_answers_as_its_mlx_lm_twin(tmp_path, dora):
    from engines.llm.adapters import attach
    from engines.sources.adapter_files import read_adapter

    mlx_dir = write_adapter(tmp_path / "mlx", 1, dora=dora)
    peft_dir = as_peft(mlx_dir, tmp_path / "peft")
    read = read_adapter(peft_dir)
    assert (read.format, read.kind) == ("peft", "dora" if dora else "lora")
    model = tiny_llama()
    adapters = attach(
        "tiny",
        model,
        [AdapterConfig(id="mlx", path=str(mlx_dir)), AdapterConfig(id="peft", path=str(peft_dir))],
        None,
    )
    reference = [greedy(fused(mlx_dir), p) for p in PROMPTS]
    assert batched(model, adapters, [(PROMPTS[0], 1)]) == reference[:1]  # alone
    rows = [(PROMPTS[0], 1), (PROMPTS[1], 0), (PROMPTS[1], 1), (PROMPTS[0], None)]
    expected = [reference[0], reference[1], reference[1], greedy(tiny_llama(), PROMPTS[0])]
    assert batched(model, adapters, rows) == expected
    assert reference[0] != expected[-1]  # the adapter changes the answer
