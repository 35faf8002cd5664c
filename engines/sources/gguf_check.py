"""What the GGUF conversion can express: tensor names mapped to mlx-lm's, and the check.

MLX reads GGUF through gguflib, which trusts every length and offset in the file: a
truncated or corrupt file crashes the process instead of raising. So `check_gguf` walks
the whole header with bounded reads (`read_gguf_header`) and refuses what the conversion
cannot express (architecture, tokenizer, tensor names) before MLX reads a byte.
"""

from __future__ import annotations

from pathlib import Path

from engines.errors import GGUFFormatError, SourceError
from engines.sources.gguf_header import BITS, GGUFHeader, read_gguf_header

_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
BLOCK = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_PRE_TOKENIZERS = ("smollm", "gpt2")  # tokenizer.ggml.pre values we know how to rebuild


def mlx_name(gguf_name: str) -> str | None:
    """`blk.3.attn_q.scales` -> `model.layers.3.self_attn.q_proj.scales`; None if unknown."""
    stem, _, suffix = gguf_name.rpartition(".")
    if stem in _TOP:
        return f"{_TOP[stem]}.{suffix}"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in BLOCK:
        return f"model.layers.{int(parts[1])}.{BLOCK[parts[2]]}.{suffix}"
    return None


def _check_supported(model_id: str, path: str, header: GGUFHeader) -> None:
    """Refuse what the conversion cannot express, before MLX reads a byte."""
    meta = header.metadata
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise SourceError(model_id, path, f"unsupported architecture {arch!r} (only llama)")
    layers = meta.get("llama.block_count")
    if not isinstance(layers, int) or not 0 < layers <= len(header.tensors):
        raise SourceError(model_id, path, f"bad llama.block_count {layers!r}")
    tok_model, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre", "gpt2")
    if tok_model != "gpt2" or pre not in _PRE_TOKENIZERS:
        raise SourceError(
            model_id,
            path,
            f"unsupported tokenizer {tok_model!r}/{pre!r} "
            f"(only byte-level BPE 'gpt2' with pre-tokenizer {_PRE_TOKENIZERS})",
        )
    for t in header.tensors:
        if mlx_name(t.name) is None or (t.kind in BITS and not t.name.endswith(".weight")):
            raise SourceError(model_id, path, f"unsupported tensor {t.name!r} for llama")


def check_gguf(model_id: str, path: Path | str, file: Path | None = None) -> GGUFHeader:
    """Validate a GGUF file and check the conversion supports it; SourceError if not.

    `file` is the bytes to read when they are a private copy of `path`.
    """
    path = str(path)
    file = file or Path(path)
    try:
        header = read_gguf_header(file)
    except GGUFFormatError as e:
        raise SourceError(model_id, path, str(e)) from None
    except OSError as e:
        raise SourceError(model_id, path, f"unreadable: {e.strerror or e}") from None
    _check_supported(model_id, path, header)
    return header
