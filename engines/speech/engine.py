"""Speech to text on MLX: the engine that serves a Whisper model (`task: transcribe`).

A request carries the uploaded file as sent; it is decoded here, on the model's thread
(PyAV, to 16 kHz mono: engines/speech/audio.py), so the event loop never decodes audio and
a file that is not audio is this request's 400 alone. The clip is transcribed whole:
Whisper's own loop slides its 30 s window to the last timestamp it decoded, so a long clip
comes out in one piece with timestamps counted from the clip's start.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from engines.base import Capabilities, LoadInfo
from engines.batch import Batch, text_refused
from engines.compat import refuse_off_task
from engines.errors import BadRequest, SourceError
from engines.mlx.memory import release_buffers
from engines.mlx.weights import weight_bytes
from engines.sources.resolve import check_source, resolve_source
from engines.speech.audio import NotAudio, TooLong, decode_audio
from engines.speech.whisper import load_whisper, transcribe
from schemas.canonical import ChatRequest, Transcribed, TranscribeRequest
from schemas.config import ModelConfig


class WhisperEngine:
    """A Whisper model behind the Engine protocol: `transcribe` alone."""

    capabilities = Capabilities(chat=False, embed=False, images=False, transcribe=True)

    def __init__(self, model: ModelConfig, base_dir: Path | None) -> None:
        self._config = model
        self._base_dir = base_dir
        self._model = None
        self._english_only = False

    def estimate_memory(self) -> int:
        """The weights' size as loaded (float32): an MLX directory's safetensors as stored;
        a CTranslate2 model.bin may hold float16, so twice its size bounds it. No KV cache
        outlives a request."""
        path = check_source(self._config.id, self._config.source, base_dir=self._base_dir)
        ct2 = path / "model.bin"
        if ct2.is_file():
            return 2 * ct2.stat().st_size
        return sum(f.stat().st_size for f in path.glob("*.safetensors"))

    def load(self, memory_left: int | None = None) -> LoadInfo:
        refuse_off_task(self._config, "transcribe")
        model_id = self._config.id
        path = resolve_source(model_id, self._config.source, base_dir=self._base_dir)
        try:
            dims = json.loads((path / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise SourceError(model_id, str(path / "config.json"), str(e)) from None
        if not isinstance(dims, dict) or "n_audio_layer" not in dims:
            raise SourceError(
                model_id,
                str(path),
                "config.json has no Whisper dimensions (n_audio_layer …): `task: transcribe` "
                "reads an MLX Whisper directory or a CTranslate2 Whisper (faster-whisper's "
                "model.bin), not a transformers checkpoint",
            )
        if not (path / "tokenizer.json").is_file():
            raise SourceError(model_id, str(path / "tokenizer.json"), "not found: Whisper needs it")
        self._model = load_whisper(path)
        # English-only checkpoints (tiny.en …) have 51864 tokens; multilingual ones 51865+.
        self._english_only = int(dims["n_vocab"]) < 51865
        detail = {
            "path": str(path),
            "task": "transcribe",
            "languages": "en" if self._english_only else "multilingual",
        }
        return LoadInfo(
            memory_bytes=weight_bytes(self._model), context=int(dims["n_text_ctx"]), detail=detail
        )

    def open_batch(self) -> Batch:
        """The empty batch a runner's thread opens; transcriptions never join it."""
        return text_refused(
            f"model {self._config.id!r} is a speech-to-text model; it does not generate text "
            "from messages: send it audio on /v1/audio/transcriptions"
        )

    def transcribe(
        self, request: TranscribeRequest, on_segment: Callable[[str], None] | None = None
    ) -> Transcribed:
        started = time.perf_counter()
        from mlx_audio.stt.models.whisper.tokenizer import LANGUAGES

        if request.language is not None and request.language not in LANGUAGES:
            raise BadRequest(
                f"language: {request.language!r} is not a language Whisper knows; send an "
                "ISO-639-1 code such as 'en', 'fr' or 'de'"
            )
        if self._english_only:
            if request.task == "translate":
                raise BadRequest(
                    f"model {self._config.id!r} is an English-only Whisper: it transcribes "
                    "English and does not translate; send translations to a multilingual "
                    "Whisper model"
                )
            if request.language not in (None, "en"):
                raise BadRequest(
                    f"language: model {self._config.id!r} is an English-only Whisper and "
                    f"does not transcribe {request.language!r}; send 'en' or leave it out"
                )
        try:
            samples = decode_audio(request.audio, request.max_seconds)
        except NotAudio as e:
            raise BadRequest(f"file: {e}") from None
        except TooLong as e:
            raise BadRequest(
                f"file: {e}, the longest clip served here (limits.max_audio); split it"
            ) from None
        result = transcribe(
            self._model,
            samples,
            language="en" if self._english_only else request.language,
            task=request.task,
            prompt=request.prompt,
            temperature=request.temperature,
            words=request.words,
            on_segment=on_segment,
        )
        return Transcribed(
            text=result.text,
            language=LANGUAGES.get(result.language, result.language),  # "english", as OpenAI
            segments=result.segments,
            audio_seconds=result.audio_seconds,
            new_tokens=sum(len(s.tokens) for s in result.segments),
            seconds=time.perf_counter() - started,
        )

    def count_prompt(self, request: ChatRequest) -> int:
        """Nothing is read as a prompt: Whisper's input is audio."""
        return 0

    def trim(self) -> None:
        release_buffers()

    def reasons(self) -> bool:
        return False

    def unload(self) -> None:
        self._model = None
        release_buffers()
