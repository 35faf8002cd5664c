"""Text to speech on MLX: the engine that serves a Kokoro model (`task: speech`).

A request is read aloud a piece at a time (a sentence, or part of a long one: Kokoro reads
510 phonemes a pass), each piece's audio encoded and handed out as soon as it is made, so
the answer streams as it is generated. Runs on the model's own thread, like every engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from engines.base import Capabilities, LoadInfo
from engines.batch import Batch, text_refused
from engines.compat import refuse_off_task
from engines.errors import BadRequest, SourceError
from engines.mlx.memory import release_buffers
from engines.mlx.weights import weight_bytes
from engines.sources.kokoro_dir import check_kokoro_dir, kokoro_config, voice_files
from engines.sources.resolve import check_source, resolve_source
from engines.tts.encode import AudioEncoder
from engines.tts.frontend import UNSERVED_LANGUAGES, language_of, pieces
from engines.tts.kokoro import load_kokoro, load_voice, synthesize
from schemas.canonical import ChatRequest, SpeechRequest, Spoken, Voice
from schemas.config import ModelConfig


class KokoroEngine:
    """A Kokoro model behind the Engine protocol: `speak` and `voices` alone."""

    capabilities = Capabilities(chat=False, embed=False, images=False, speech=True)

    def __init__(self, model: ModelConfig, base_dir: Path | None) -> None:
        self._config = model
        self._base_dir = base_dir
        self._model = None
        self._voices: dict[str, Path] = {}
        self._packs: dict[str, object] = {}  # voice -> its style pack, read at first use

    def estimate_memory(self) -> int:
        """The weights as stored (Kokoro's are float32) and every voice pack."""
        path = check_source(self._config.id, self._config.source, base_dir=self._base_dir)
        files = [*path.glob("*.safetensors"), *voice_files(path).values()]
        return sum(f.stat().st_size for f in files)

    def load(self, memory_left: int | None = None) -> LoadInfo:
        refuse_off_task(self._config, "speech")
        model_id = self._config.id
        path = resolve_source(model_id, self._config.source, base_dir=self._base_dir)
        config = kokoro_config(path)
        if config is None:
            raise SourceError(
                model_id,
                str(path / "config.json"),
                "not a Kokoro config (istftnet, plbert, vocab): `task: speech` reads a "
                "Kokoro directory (config.json, *.safetensors, voices/*.safetensors)",
            )
        check_kokoro_dir(model_id, path)
        self._voices = voice_files(path)
        self._packs = {}
        self._model = load_kokoro(path)
        detail = {"path": str(path), "task": "speech", "voices": str(len(self._voices))}
        return LoadInfo(memory_bytes=weight_bytes(self._model), context=510, detail=detail)

    def voices(self) -> list[Voice]:
        """The voices the directory holds whose language is served (Japanese and Mandarin
        need misaki's own G2P for them, not installed). Read from the directory where the
        model is not loaded (a cheap listing, no weights)."""
        names = self._voices
        if self._model is None:
            path = check_source(self._config.id, self._config.source, base_dir=self._base_dir)
            names = voice_files(path)
        return [Voice(v, lang) for v in names if (lang := language_of(v)) is not None]

    def speak(
        self,
        request: SpeechRequest,
        on_chunk: Callable[[bytes], None],
        cancelled: Callable[[], bool],
    ) -> Spoken:
        started = time.perf_counter()
        language = self._language(request.voice)
        pack = self._pack(request.voice)
        rate = self._model.sample_rate
        encoder = AudioEncoder(request.response_format, rate)
        samples = read = frames = segments = 0
        for _, phonemes in pieces(request.text, language):
            if cancelled():
                break
            made = synthesize(self._model, phonemes, pack, request.speed)
            samples += len(made.samples)
            read += made.input_tokens
            frames += made.frames
            segments += 1
            if data := encoder.push(made.samples):
                on_chunk(data)
        if segments == 0 and not cancelled():
            raise BadRequest(f"input: nothing in it can be read aloud in {language} (no phonemes)")
        if data := encoder.close():
            on_chunk(data)
        return Spoken(
            audio_seconds=samples / rate,
            sample_rate=rate,
            seconds=time.perf_counter() - started,
            input_tokens=read,
            output_tokens=frames,
            segments=segments,
        )

    def _language(self, voice: str) -> str:
        if voice not in self._voices:
            raise BadRequest(
                f"voice: {voice!r} is not a voice of model {self._config.id!r}; its voices: "
                f"{', '.join(v.name for v in self.voices()) or 'none'}"
            )
        language = language_of(voice)
        if language is None:
            named = UNSERVED_LANGUAGES.get(voice[:1].lower(), f"language {voice[:1]!r}")
            raise BadRequest(
                f"voice: {voice!r} reads {named}, whose text frontend (misaki's own G2P for "
                "it) is not installed here; pick a voice starting a, b, e, f, h, i or p"
            )
        return language

    def _pack(self, voice: str):
        pack = self._packs.get(voice)
        if pack is None:
            pack = self._packs[voice] = load_voice(self._voices[voice])
        return pack

    def open_batch(self) -> Batch:
        """The empty batch a runner's thread opens; speech never joins it."""
        return text_refused(
            f"model {self._config.id!r} is a text-to-speech model; it does not generate text "
            "from messages: send it text to read aloud on /v1/audio/speech"
        )

    def count_prompt(self, request: ChatRequest) -> int:
        return 0

    def trim(self) -> None:
        release_buffers()

    def reasons(self) -> bool:
        return False

    def unload(self) -> None:
        self._model = None
        self._packs = {}
        release_buffers()
