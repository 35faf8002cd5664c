"""Random-weight 4-bit Llama models in MLX layout (config.json, model.safetensors, tokenizer),
for speed measurements: decode speed does not depend on the weights' values.

    python3 bench/gpu/make_models.py --tokenizer DIR --out DIR [SHAPE ...]

SHAPE: smollm2 (SmolLM2-135M), 1b and 8b (the Llama shapes of gpu/mlx_cuda_probe.py), tiny (a
local smoke test). Weights: bfloat16, then nn.quantize(group_size=64, bits=4), as the probe does.
An existing complete model directory is kept. The weights are seeded: the same shape is the same
model everywhere.

The tokenizer is SmolLM2's (49152 tokens), made to fit any shape:
- vocabulary past 49152 (the Llama shapes' 128256) is filled with plain tokens " w<id>", so every
  id a random model emits decodes to text;
- the end-of-sequence token is a new token "<|never|>" whose id is the model's vocab_size, an id
  the model cannot emit, so every request decodes exactly max_tokens tokens on both sides.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

SHAPES = {
    "tiny": dict(
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=49152,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
    ),
    "smollm2": dict(
        hidden_size=576,
        num_hidden_layers=30,
        intermediate_size=1536,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
    ),
    "1b": dict(
        hidden_size=2048,
        num_hidden_layers=16,
        intermediate_size=8192,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        rope_theta=500000.0,
        tie_word_embeddings=False,
        max_position_embeddings=131072,
    ),
    "8b": dict(
        hidden_size=4096,
        num_hidden_layers=32,
        intermediate_size=14336,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        rope_theta=500000.0,
        tie_word_embeddings=False,
        max_position_embeddings=131072,
    ),
}
NEVER = "<|never|>"


def write_tokenizer(src: Path, out: Path, vocab_size: int) -> None:
    tok = json.loads((src / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    taken = set(vocab)
    for i in range(len(vocab), vocab_size):
        name = f"\u0120w{i}"  # byte-level BPE: \u0120 is the space byte
        assert name not in taken
        vocab[name] = i
    assert len(vocab) == vocab_size and NEVER not in taken
    vocab[NEVER] = vocab_size
    tok["added_tokens"].append(
        {
            "id": vocab_size,
            "content": NEVER,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    cfg["eos_token"] = NEVER
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))


def make(
    shape: str, tokenizer: Path, root: Path, dtype: str = "bfloat16", quantized: bool = True
) -> Path:
    """The model SHAPE under ROOT/SHAPE (ROOT/SHAPE-DTYPE unquantized). DTYPE float32 is for
    tests that compare two ways of computing the same model: bfloat16 rounding differs with the
    order of a split sum, which on random weights' near-tie logits is enough to change the greedy
    token. `quantized=False` stores the weights as DTYPE: for a peer server that runs weights as
    stored (the gateway expands 4-bit ones to bfloat16 on CUDA), so both run the same arithmetic."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    out = root / (shape if quantized else f"{shape}-{dtype}")
    if (out / "done").exists():
        print(f"[{shape}] kept {out}", flush=True)
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    started = time.perf_counter()
    shape_args = SHAPES[shape]
    args = llama.ModelArgs(model_type="llama", rms_norm_eps=1e-5, **shape_args)
    # Seeded, so a shape is the same model on every machine and in every run: a test that compares
    # two ways of running it (one process against ranks) compares the same near-tie logits.
    mx.random.seed(0)
    model = llama.Model(args)
    model.set_dtype(getattr(mx, dtype))
    if quantized:
        nn.quantize(model, group_size=64, bits=4)
    weights = dict(tree_flatten(model.parameters()))
    mx.eval(weights)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        **shape_args,
        "rms_norm_eps": 1e-5,
        "bos_token_id": 1,
        "eos_token_id": shape_args["vocab_size"],  # "<|never|>": see the module docstring
        "torch_dtype": dtype,
        **({"quantization": {"group_size": 64, "bits": 4}} if quantized else {}),
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    write_tokenizer(tokenizer, out, shape_args["vocab_size"])
    nbytes = sum(v.nbytes for v in weights.values())
    (out / "done").write_text(f"{nbytes}\n")
    print(
        f"[{shape}] wrote {out}: {nbytes / 1e9:.2f} GB of weights in "
        f"{time.perf_counter() - started:.1f} s",
        flush=True,
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokenizer", type=Path, required=True, help="SmolLM2 tokenizer dir")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("shapes", nargs="*", default=["smollm2", "1b", "8b"])
    parser.add_argument(
        "--unquantized", action="store_true", help="store bfloat16 weights (SHAPE-bfloat16)"
    )
    args = parser.parse_args()
    for shape in args.shapes:
        make(shape, args.tokenizer, args.out, quantized=not args.unquantized)


if __name__ == "__main__":
    main()
