"""Whisper on MLX through mlx-audio's Whisper (`mlx_audio.stt.models.whisper`).

mlx-audio over mlx-whisper: on Linux with `mlx[cpu]`, mlx-whisper's wheel pulls torch and
numba (measured with `pip install --dry-run`), mlx-audio 0.6 adds only miniaudio and
sounddevice; it is also the one of the two released most often. Its Whisper is
openai-whisper's transcribe loop (30 s windows, seeking to the last timestamp, so a long
clip comes out whole with continuous timestamps). Its tokenizer comes from transformers'
processor; ours is built from tokenizer.json alone (engines/speech/tokenizer.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import numpy as np

from engines.speech.audio import SAMPLE_RATE
from engines.speech.tokenizer import WhisperProcessorShim, WhisperTextTokenizer


class Segment(msgspec.Struct, frozen=True):
    start: float
    end: float
    text: str


class Transcript(msgspec.Struct, frozen=True):
    text: str
    language: str
    segments: list[Segment]
    audio_seconds: float


def load_whisper(path: Path, *, fp16: bool = False):
    """mlx-audio's Whisper Model from an MLX Whisper directory (config.json with the
    dimensions, model.safetensors, tokenizer.json, optional generation_config.json).
    float32 by default: on the CPU it is the faster of the two."""
    import mlx.core as mx
    from mlx_audio.stt.models.whisper.whisper import Model, ModelDimensions

    dims = ModelDimensions.from_dict(json.loads((path / "config.json").read_text()))
    model = Model(dims, mx.float16 if fp16 else mx.float32)
    model.load_weights(str(path / "model.safetensors"))
    generation = path / "generation_config.json"
    if generation.is_file():
        heads = json.loads(generation.read_text()).get("alignment_heads")
        if heads:
            model.set_alignment_heads(heads)
    model._processor = WhisperProcessorShim(WhisperTextTokenizer(path / "tokenizer.json"))
    mx.eval(model.parameters())
    return model


def transcribe(
    model,
    samples: np.ndarray,
    *,
    language: str | None = None,
    task: str = "transcribe",
    prompt: str | None = None,
    temperature: float | None = None,
) -> Transcript:
    """The whole clip's text and segments. `temperature` None: Whisper's fallback ladder
    (0.0, then 0.2 … 1.0 where a window comes out repetitive or improbable)."""
    import mlx.core as mx

    result = model.generate(
        samples,
        language=language,
        task=task,
        initial_prompt=prompt or None,
        temperature=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0) if temperature is None else temperature,
        fp16=model.dtype == mx.float16,
    )
    segments = [
        Segment(start=round(s["start"], 2), end=round(s["end"], 2), text=s["text"])
        for s in result.segments
        if s["text"]
    ]
    return Transcript(
        text=result.text.strip(),
        language=result.language,
        segments=segments,
        audio_seconds=len(samples) / SAMPLE_RATE,
    )
