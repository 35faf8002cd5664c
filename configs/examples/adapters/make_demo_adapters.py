"""Writes the two demo adapters beside this file (seeded random LoRA matrices in mlx-lm's
format for SmolLM2-135M: rank 4 on every layer's q_proj and v_proj, float16):

    .venv/bin/python configs/examples/adapters/make_demo_adapters.py
"""

import json
from pathlib import Path

import mlx.core as mx

HIDDEN, KV, LAYERS, RANK = 576, 192, 30, 4  # SmolLM2-135M: q_proj 576 -> 576, v_proj 576 -> 192

for seed, name in ((11, "concise"), (12, "playful")):
    folder = Path(__file__).parent / name
    mx.random.seed(seed)
    weights = {}
    for layer in range(LAYERS):
        for proj, out in (("q_proj", HIDDEN), ("v_proj", KV)):
            stem = f"model.layers.{layer}.self_attn.{proj}"
            weights[f"{stem}.lora_a"] = (mx.random.normal((HIDDEN, RANK)) * 0.1).astype(mx.float16)
            weights[f"{stem}.lora_b"] = (mx.random.normal((RANK, out)) * 0.1).astype(mx.float16)
    mx.save_safetensors(str(folder / "adapters.safetensors"), weights)
    keys = ["self_attn.q_proj", "self_attn.v_proj"]
    params = {"rank": RANK, "scale": 4.0, "dropout": 0.0, "keys": keys}
    config = {"fine_tune_type": "lora", "num_layers": LAYERS, "lora_parameters": params}
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
