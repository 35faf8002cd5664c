"""Kokoro on MLX through mlx-audio's Kokoro (`mlx_audio.tts.models.kokoro`).

mlx-audio's own `generate` goes through its pipeline, which builds misaki's English G2P
(spaCy and a model fetched at first use) and looks voices up on the hub; here the model is
called on phonemes the gateway made (engines/tts/frontend.py) with the voice packs the
directory holds, the way that pipeline calls it: `model(phonemes, pack[len - 1], speed)`.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np


class Made(NamedTuple):
    samples: np.ndarray  # mono float32 at the model's rate
    input_tokens: int  # phoneme ids read (those in the vocabulary, and the two boundaries)
    frames: int  # duration frames predicted


def load_kokoro(path: Path):
    """mlx-audio's Kokoro Model from a Kokoro directory, every weight checked (strict)."""
    from mlx_audio.tts.utils import load_model

    return load_model(path, model_type="kokoro", strict=True)


def load_voice(file: Path):
    """A voice's style pack: [510, 1, 256], one style a phoneme count."""
    from mlx_audio.tts.models.kokoro.voice import load_voice_tensor

    return load_voice_tensor(str(file))


def synthesize(model, phonemes: str, pack, speed: float) -> Made:
    """One pass: a piece's phonemes (510 at most) read in the pack's voice."""
    out = model(phonemes, pack[len(phonemes) - 1], speed, return_output=True)
    samples = np.array(out.audio, dtype=np.float32).reshape(-1)
    known = sum(1 for p in phonemes if p in model.vocab)
    frames = int(out.pred_dur.sum()) if out.pred_dur is not None else 0
    return Made(samples=samples, input_tokens=known + 2, frames=frames)
