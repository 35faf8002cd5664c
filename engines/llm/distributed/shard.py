"""Each rank's part of the weights: which splits a checkpoint allows, and loading one part.

`pipeline` gives each rank a run of layers (the model's own `pipeline()` where mlx-lm has
one, ours for llama: pipeline_llama.py); `tensor` gives each rank a slice of every layer's
heads and MLP (the model's own `shard()`). The model is built lazily from its safetensors
and split before its weights are evaluated, so a rank reads only the tensors it keeps.
"""

from __future__ import annotations

import json
from pathlib import Path

from engines.errors import SourceError

PIPELINED_HERE = {"llama"}  # architectures this package pipelines where mlx-lm does not


def check_split(model_id: str, path: Path, ranks: int, mode: str) -> None:
    """Refuse a split the checkpoint cannot take, before any rank starts, with the numbers."""
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SourceError(model_id, str(path), f"config.json: {error}") from None
    text = config.get("text_config", config)
    layers = text.get("num_hidden_layers", 0)
    if mode == "pipeline" and layers < ranks:
        raise SourceError(
            model_id, str(path), f"{layers} layers cannot be pipelined over {ranks} ranks"
        )
    if mode == "tensor":
        heads = text.get("num_attention_heads", 0)
        kv = text.get("num_key_value_heads", heads)
        mlp = text.get("intermediate_size", 0)
        for name, count in (("query heads", heads), ("key/value heads", kv), ("MLP rows", mlp)):
            if count % ranks:
                raise SourceError(
                    model_id,
                    str(path),
                    f"tensor mode splits {name} over ranks: {count} {name} do not divide "
                    f"by {ranks} ranks (use mode: pipeline, or {_divisors(heads, kv)} ranks)",
                )
        # A quantized layer that sums over ranks keeps whole quantization groups in each.
        group = (config.get("quantization") or {}).get("group_size")
        width = text.get("head_dim") or text.get("hidden_size", 0) // max(heads, 1)
        for name, count in (("attention output", heads * width), ("MLP", mlp)):
            if group and (count // ranks) % group:
                raise SourceError(
                    model_id,
                    str(path),
                    f"tensor mode gives each of {ranks} ranks {count // ranks} of the {name}'s "
                    f"{count} columns, not a whole number of {group}-wide quantization groups "
                    "(use mode: pipeline)",
                )


def _divisors(heads: int, kv: int) -> str:
    fits = [n for n in range(2, 65) if heads % n == 0 and kv % n == 0]
    return " or ".join(map(str, fits[:4])) or "no number of"


def load_shard(model_id: str, path: Path, group, mode: str):
    """This rank's model and the tokenizer: `(model, tokenizer, (held, total))`, where
    `held / total` is the share of the KV cache this rank holds (its layers or heads)."""
    from mlx_lm.utils import load_model, load_tokenizer

    from engines.llm.distributed.pipeline_llama import model_classes

    try:
        model, config = load_model(path, lazy=True, get_model_classes=model_classes)
        tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))
    except Exception as error:
        raise SourceError(model_id, str(path), f"{type(error).__name__}: {error}") from None
    size = group.size()
    if size == 1:
        return model, tokenizer, (1, 1)
    if mode == "tensor":
        if not hasattr(model, "shard"):
            raise SourceError(model_id, str(path), "this architecture has no tensor split")
        model.shard(group)
        return model, tokenizer, (1, size)
    inner = getattr(model, "model", None)
    if not hasattr(inner, "pipeline"):
        raise SourceError(
            model_id,
            str(path),
            f"this architecture ({config.get('model_type')}) has no pipeline split in mlx-lm",
        )
    total = len(inner.layers)
    inner.pipeline(group)
    return model, tokenizer, (inner.end_idx - inner.start_idx, total)
