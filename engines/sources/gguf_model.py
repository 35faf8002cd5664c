"""Write a checked GGUF file as an mlx-lm model: renamed weights, config.json, quantization.

The weights are loaded by MLX and saved under mlx-lm's tensor names; the llama config
and the quantization block are read from the GGUF metadata and tensor kinds. The
tokenizer files are built by `gguf_tokenizer`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from engines.errors import SourceError
from engines.sources.gguf_check import BLOCK, mlx_name
from engines.sources.gguf_header import BITS, GGUFHeader
from engines.sources.gguf_tokenizer import write_tokenizer


def write_model(model_id: str, path: str, copy: Path, header: GGUFHeader, out: Path) -> None:
    """Load the private `copy` with MLX and write its weights and config.json into `out`."""
    import mlx.core as mx  # here, so validating configs never pays for importing MLX

    try:
        weights, meta = mx.load(str(copy), return_metadata=True)
    except Exception as e:  # MLX raises RuntimeError/ValueError with its own wording
        raise SourceError(model_id, path, f"MLX could not read it: {e}") from None
    renamed = {mlx_name(k): v for k, v in weights.items()}
    hm = header.metadata
    try:
        n_layers = int(hm["llama.block_count"])
        tokens = list(meta["tokenizer.ggml.tokens"])
        config = {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": int(hm["llama.embedding_length"]),
            "num_hidden_layers": n_layers,
            "intermediate_size": int(hm["llama.feed_forward_length"]),
            "num_attention_heads": int(hm["llama.attention.head_count"]),
            "num_key_value_heads": int(
                hm.get("llama.attention.head_count_kv") or hm["llama.attention.head_count"]
            ),
            "rms_norm_eps": float(hm["llama.attention.layer_norm_rms_epsilon"]),
            "vocab_size": len(tokens),
            "rope_theta": float(hm.get("llama.rope.freq_base", 10000.0)),
            # GGUF llama Q/K weights are permuted for the interleaved rotary layout.
            "rope_traditional": True,
            "tie_word_embeddings": "lm_head.weight" not in renamed,
            "max_position_embeddings": int(hm["llama.context_length"]),
        }
    except (KeyError, TypeError, ValueError) as e:
        raise SourceError(model_id, path, f"missing or bad metadata {e}") from None
    if "llama.attention.key_length" in hm:
        config["head_dim"] = int(hm["llama.attention.key_length"])
    for key in ("bos_token_id", "eos_token_id"):
        if f"tokenizer.ggml.{key}" in hm:
            config[key] = int(hm[f"tokenizer.ggml.{key}"])
    config["gguf"] = {k: v for k, v in hm.items() if k.startswith("general.") and v is not None}
    expected = {f"model.layers.{i}.{m}.weight" for i in range(n_layers) for m in BLOCK.values()}
    expected |= {"model.embed_tokens.weight", "model.norm.weight"}
    if missing := sorted(expected - renamed.keys()):
        raise SourceError(model_id, path, f"missing tensor {missing[0]} ({len(missing)} missing)")
    if renamed["model.embed_tokens.weight"].shape[0] != len(tokens):
        raise SourceError(model_id, path, "embedding rows do not match the vocabulary size")
    quant = _quantization(header)
    if quant:
        config["quantization"] = quant
    write_tokenizer(model_id, path, hm, meta, tokens, out)
    mx.save_safetensors(str(out / "model.safetensors"), renamed, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2, default=str))


def _quantization(header: GGUFHeader) -> dict[str, object]:
    """mlx-lm's quantization block: the commonest bit width, per-module entries for others."""
    bits = {
        mlx_name(t.name)[: -len(".weight")]: BITS[t.kind] for t in header.tensors if t.kind in BITS
    }
    if not bits:
        return {}
    common = Counter(bits.values()).most_common(1)[0][0]
    quant: dict[str, object] = {"group_size": 32, "bits": common}  # GGUF blocks are 32 wide
    quant |= {m: {"group_size": 32, "bits": b} for m, b in bits.items() if b != common}
    return quant
