"""A seeded random-weight Kokoro directory, for tests and demos.

No text-to-speech weights ship in a PyPI package and nothing can be fetched from a hub in
CI, so this builds one with mlx-audio's own Kokoro classes: the real architecture (ALBERT,
prosody predictor, text encoder, iSTFTNet decoder) with a small ALBERT and one predictor
layer, weights drawn from a fixed seed, written in the layout a Kokoro checkpoint has
(`config.json`, one `*.safetensors`, `voices/<name>.safetensors` each holding `voice`, a
[510, 1, 256] style pack). Its voice is noise; its pipeline (G2P, phoneme ids, durations,
decoding at 24 kHz, the voice packs) is the real one. The decoder's widths are fixed by
mlx-audio's classes (1024/512 channels), so the directory is ~100 MB however small the rest.
"""

from __future__ import annotations

import json
from pathlib import Path

SEED = 55
VOICES = ("af_heart", "am_adam", "bf_emma")
# Kokoro's phoneme vocabulary (ids 1..177 in the real config): every symbol misaki's espeak
# G2P writes for the languages served, numbered in order. Symbols missing here are dropped
# by Kokoro itself, as the real vocabulary drops what it lacks.
_SYMBOLS = (
    ';:,.!?¡¿—…"«»“” ()'
    "AIOQSTWYᵊabcdefhijklmnopqrstuvwxyz"
    "ɑɐɒæβɔɕçɖðʤəɚɛɜɟɡɥɨɪʝɯɰŋɳɲɴøɸθœɹɾɻʁɽʂʃʈʧʊʋʌɣɤχʎʒʔˈˌːʰʲ↓→↗↘ᵻ"
)


def full_size_config() -> dict:
    """Kokoro-82M's own dimensions (12-layer ALBERT of 768, three predictor layers, three
    resblock kernels, 50 duration bins): for measuring, not for tests."""
    config = kokoro_config()
    config["istftnet"]["resblock_kernel_sizes"] = [3, 7, 11]
    config["istftnet"]["resblock_dilation_sizes"] = [[1, 3, 5]] * 3
    config["plbert"] = {
        "hidden_size": 768,
        "num_attention_heads": 12,
        "intermediate_size": 2048,
        "max_position_embeddings": 512,
        "num_hidden_layers": 12,
        "dropout": 0.1,
    }
    config.update(n_layer=3, max_dur=50)
    return config


def kokoro_config() -> dict:
    vocab = {s: i + 1 for i, s in enumerate(dict.fromkeys(_SYMBOLS))}
    return {
        "model_type": "kokoro",
        "istftnet": {
            "upsample_kernel_sizes": [20, 12],
            "upsample_rates": [10, 6],
            "gen_istft_hop_size": 5,
            "gen_istft_n_fft": 20,
            "resblock_dilation_sizes": [[1, 3, 5]],
            "resblock_kernel_sizes": [3],
            "upsample_initial_channel": 512,
        },
        "dim_in": 64,
        "dropout": 0.2,
        "hidden_dim": 512,  # the decoder reads 512 channels: fixed by mlx-audio's Decoder
        "max_conv_dim": 512,
        # A duration is the sum of max_dur sigmoids: 4 gives ~2 frames (50 ms) a phoneme on
        # random weights, short clips on a slow CPU (the real model's 50 is trained down).
        "max_dur": 4,
        "multispeaker": True,
        "n_layer": 1,
        "n_mels": 80,
        "n_token": 178,
        "style_dim": 128,
        "text_encoder_kernel_size": 5,
        "plbert": {
            "hidden_size": 32,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 512,
            "num_hidden_layers": 1,
            "dropout": 0.1,
            "embedding_size": 32,
        },
        "vocab": vocab,
        "sample_rate": 24000,
    }


def build_kokoro(
    directory: Path, voices: tuple[str, ...] = VOICES, config: dict | None = None
) -> Path:
    """Write the demo Kokoro into `directory` (created) and return it. Each weight is stored
    in the form Kokoro's `sanitize` turns into its MLX layout (a checkpoint's PyTorch
    layout), so loading it runs the same path a real checkpoint does."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.tts.models.kokoro.istftnet import ConvWeighted
    from mlx_audio.tts.models.kokoro.kokoro import Model, ModelConfig

    directory.mkdir(parents=True, exist_ok=True)
    config = config or kokoro_config()
    mx.random.seed(SEED)
    model = Model(ModelConfig.from_dict(config))
    # mlx-audio's weight-normed convs start with every direction at ones (a checkpoint
    # overwrites them): drawn at random here, or each layer's channels all agree and the
    # activations grow by sqrt(fan-in) a layer into inf (NaN audio).
    for _, module in model.named_modules():
        if isinstance(module, ConvWeighted):
            module.weight_v = mx.random.normal(module.weight_v.shape)
    stored = {}
    for name, value in tree_flatten(model.parameters()):
        stored[name] = _as_stored(model, name, value)
    mx.save_safetensors(str(directory / "kokoro-demo.safetensors"), stored)
    (directory / "config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1))
    (directory / "voices").mkdir(exist_ok=True)
    for i, voice in enumerate(voices):
        mx.random.seed(SEED + 1 + i)
        pack = mx.random.normal((510, 1, 256)) * 0.5
        mx.save_safetensors(str(directory / "voices" / f"{voice}.safetensors"), {"voice": pack})
    return directory


def _as_stored(model, name: str, value):
    """The stored form `sanitize` maps back to `value`: as is, or its last two axes
    swapped (Kokoro's sanitize transposes conv weights it takes for PyTorch's)."""
    for candidate in (value, value.transpose(0, 2, 1) if value.ndim == 3 else None):
        if candidate is None:
            continue
        back = model.sanitize({name: candidate}).get(name)
        if back is not None and back.shape == value.shape:
            return candidate
    raise ValueError(f"no stored form of {name} that Kokoro's sanitize maps back")
