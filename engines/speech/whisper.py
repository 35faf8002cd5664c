"""Whisper on MLX through mlx-audio's Whisper (`mlx_audio.stt.models.whisper`).

mlx-audio over mlx-whisper: on Linux with `mlx[cpu]`, mlx-whisper's wheel pulls torch and
numba (measured with `pip install --dry-run`), mlx-audio 0.6 adds only miniaudio and
sounddevice; it is also the one of the two released most often. Its Whisper is
openai-whisper's transcribe loop (30 s windows, seeking to the last timestamp, so a long
clip comes out whole with continuous timestamps). Its tokenizer comes from transformers'
processor; ours is built from tokenizer.json alone (engines/speech/tokenizer.py).
"""

from __future__ import annotations

import builtins
import json
import re
import threading
from collections.abc import Callable
from pathlib import Path

import msgspec
import numpy as np

from engines.speech.audio import SAMPLE_RATE
from engines.speech.tokenizer import WhisperProcessorShim, WhisperTextTokenizer
from schemas.canonical import TranscriptSegment, TranscriptWord


class Transcript(msgspec.Struct, frozen=True):
    text: str
    language: str
    segments: list[TranscriptSegment]
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


# mlx-audio's loop takes no per-window callback; with `verbose` it prints each window's
# segments as `[MM:SS.mmm --> MM:SS.mmm] text` once that window is decoded. The module's
# `print` is routed here: on a thread transcribing with `on_segment` such a line is that
# segment, handed on; every other print (other threads, other lines) is dropped or printed.
_SEGMENT_LINE = re.compile(r"\[[\d:.]+ --> [\d:.]+\] (.*)", re.S)
_listening = threading.local()


def _print(*args, **kwargs) -> None:
    heard = getattr(_listening, "on_segment", None)
    if heard is None:
        builtins.print(*args, **kwargs)
        return
    line = " ".join(str(a) for a in args)
    if (m := _SEGMENT_LINE.fullmatch(line)) and m.group(1):
        heard(m.group(1))


def _listen() -> None:
    from mlx_audio.stt.models.whisper import whisper as loop

    loop.print = _print  # a module global shadows the builtin for that module's calls


def transcribe(
    model,
    samples: np.ndarray,
    *,
    language: str | None = None,
    task: str = "transcribe",
    prompt: str | None = None,
    temperature: float | None = None,
    words: bool = False,
    on_segment: Callable[[str], None] | None = None,
) -> Transcript:
    """The whole clip's text and segments (with their words' times where `words`).
    `temperature` None: Whisper's fallback ladder (0.0, then 0.2 … 1.0 where a window
    comes out repetitive or improbable). `on_segment`: called with each segment's text as
    soon as its 30 s window is decoded, on this thread."""
    import mlx.core as mx

    if on_segment is not None:
        _listen()
        _listening.on_segment = on_segment
    try:
        result = model.generate(
            samples,
            language=language,
            task=task,
            initial_prompt=prompt or None,
            temperature=(0.0, 0.2, 0.4, 0.6, 0.8, 1.0) if temperature is None else temperature,
            word_timestamps=words,
            fp16=model.dtype == mx.float16,
            verbose=True if on_segment is not None else None,
        )
    finally:
        _listening.on_segment = None
    segments = [
        TranscriptSegment(
            id=i,
            seek=int(s.get("seek", 0)),
            start=round(float(s["start"]), 2),
            end=round(float(s["end"]), 2),
            text=s["text"],
            tokens=[int(t) for t in s.get("tokens", ())],
            temperature=float(s.get("temperature", 0.0)),
            avg_logprob=float(s.get("avg_logprob", 0.0)),
            compression_ratio=float(s.get("compression_ratio", 0.0)),
            no_speech_prob=float(s.get("no_speech_prob", 0.0)),
            words=[
                TranscriptWord(
                    word=w["word"], start=round(float(w["start"]), 2), end=round(float(w["end"]), 2)
                )
                for w in s.get("words", ())
            ],
        )
        for i, s in enumerate(x for x in result.segments if x["text"])
    ]
    return Transcript(
        text=result.text.strip(),
        language=result.language,
        segments=segments,
        audio_seconds=len(samples) / SAMPLE_RATE,
    )
