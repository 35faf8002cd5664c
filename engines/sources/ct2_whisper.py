"""A CTranslate2 Whisper checkpoint (faster-whisper's format: `model.bin`, `config.json`,
`tokenizer.json`) rewritten as an MLX Whisper directory: `config.json` with the model's
dimensions, `model.safetensors` under mlx-audio's names, the tokenizer and the alignment
heads.

CTranslate2 fuses what Whisper keeps apart: self-attention's query, key and value are one
`linear_0` (split in three; Whisper's key has no bias, so that third of the bias, all
zeros, is dropped), cross-attention's key and value one `linear_1`. The heads are stored
as `num_heads`; layer counts and widths are read off the shapes.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np

from engines.sources.ct2_file import CT2FormatError, read_ct2

WHISPER_SPEC = "WhisperSpec"
# Files of a CTranslate2 Whisper directory that the conversion reads.
CT2_FILES = ("model.bin", "config.json", "tokenizer.json")


def is_ct2_whisper(path: Path) -> bool:
    """A directory holding a CTranslate2 model.bin and no MLX weights."""
    return (path / "model.bin").is_file() and not any(path.glob("*.safetensors"))


def _layers(variables: dict[str, np.ndarray], side: str) -> int:
    found = {int(m.group(1)) for k in variables if (m := re.match(rf"{side}/layer_(\d+)/", k))}
    return max(found) + 1 if found else 0


def _split(array: np.ndarray, parts: int) -> list[np.ndarray]:
    return np.split(array, parts, axis=0)


def convert_ct2_whisper(source: Path, out: Path) -> None:
    """Write the MLX Whisper directory for the CTranslate2 checkpoint at `source` into `out`.

    Raises CT2FormatError when the file is not a Whisper model this mapping knows.
    """
    import mlx.core as mx

    spec, v = read_ct2(source / "model.bin")
    if spec != WHISPER_SPEC:
        raise CT2FormatError(f"a {spec or 'unnamed spec'}, not a Whisper model")
    try:
        weights = _mlx_weights(v)
        conv1 = v["encoder/conv1/weight"]
        dims = {
            "model_type": "whisper",
            "n_mels": int(conv1.shape[1]),
            "n_audio_ctx": int(v["encoder/position_encodings/encodings"].shape[0]),
            "n_audio_state": int(conv1.shape[0]),
            "n_audio_head": int(v["encoder/num_heads"]),
            "n_audio_layer": _layers(v, "encoder"),
            "n_vocab": int(v["decoder/embeddings/weight"].shape[0]),
            "n_text_ctx": int(v["decoder/position_encodings/encodings"].shape[0]),
            "n_text_state": int(v["decoder/embeddings/weight"].shape[1]),
            "n_text_head": int(v["decoder/num_heads"]),
            "n_text_layer": _layers(v, "decoder"),
        }
    except KeyError as e:
        raise CT2FormatError(
            f"no variable {e.args[0]!r}: not a Whisper layout known here"
        ) from None
    mx.save_safetensors(str(out / "model.safetensors"), weights)
    (out / "config.json").write_text(json.dumps(dims, indent=2))
    ct2_config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    heads = ct2_config.get("alignment_heads") if isinstance(ct2_config, dict) else None
    if heads:
        (out / "generation_config.json").write_text(json.dumps({"alignment_heads": heads}))
    shutil.copyfile(source / "tokenizer.json", out / "tokenizer.json")


def _mlx_weights(v: dict[str, np.ndarray]):
    import mlx.core as mx

    w: dict[str, np.ndarray] = {}

    def linear(dst: str, src: str) -> None:
        w[f"{dst}.weight"] = v[f"{src}/weight"]
        w[f"{dst}.bias"] = v[f"{src}/bias"]

    def norm(dst: str, src: str) -> None:
        w[f"{dst}.weight"] = v[f"{src}/gamma"]
        w[f"{dst}.bias"] = v[f"{src}/beta"]

    def fused_qkv(dst: str, src: str, names: tuple[str, ...]) -> None:
        for name, weight, bias in zip(
            names,
            _split(v[f"{src}/weight"], len(names)),
            _split(v[f"{src}/bias"], len(names)),
            strict=True,
        ):
            w[f"{dst}.{name}.weight"] = weight
            if name != "key":  # Whisper's key projection has no bias (CT2 stores zeros)
                w[f"{dst}.{name}.bias"] = bias

    for side in ("encoder", "decoder"):
        for i in range(_layers(v, side)):
            src, dst = f"{side}/layer_{i}", f"{side}.blocks.{i}"
            norm(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm")
            fused_qkv(f"{dst}.attn", f"{src}/self_attention/linear_0", ("query", "key", "value"))
            linear(f"{dst}.attn.out", f"{src}/self_attention/linear_1")
            norm(f"{dst}.mlp_ln", f"{src}/ffn/layer_norm")
            linear(f"{dst}.mlp1", f"{src}/ffn/linear_0")
            linear(f"{dst}.mlp2", f"{src}/ffn/linear_1")
            if side == "decoder":
                norm(f"{dst}.cross_attn_ln", f"{src}/attention/layer_norm")
                linear(f"{dst}.cross_attn.query", f"{src}/attention/linear_0")
                fused_qkv(f"{dst}.cross_attn", f"{src}/attention/linear_1", ("key", "value"))
                linear(f"{dst}.cross_attn.out", f"{src}/attention/linear_2")
    for n in (1, 2):  # CT2 (out, in, kernel) -> MLX's Conv1d (out, kernel, in)
        w[f"encoder.conv{n}.weight"] = v[f"encoder/conv{n}/weight"].transpose(0, 2, 1)
        w[f"encoder.conv{n}.bias"] = v[f"encoder/conv{n}/bias"]
    norm("encoder.ln_post", "encoder/layer_norm")
    norm("decoder.ln", "decoder/layer_norm")
    w["decoder.token_embedding.weight"] = v["decoder/embeddings/weight"]
    w["decoder.positional_embedding"] = v["decoder/position_encodings/encodings"]
    return {k: mx.array(np.ascontiguousarray(a)) for k, a in w.items()}
