"""OpenAI's audio routes on the wire: `POST /v1/audio/transcriptions` and
`/v1/audio/translations` take a multipart form (its fields are read by
gateway/audio/form.py); these are the JSON answers. `POST /v1/audio/speech` takes JSON
(`SpeechBody`) and answers audio, or SSE events; `GET /v1/audio/voices` lists voices."""

from __future__ import annotations

from typing import Literal

import msgspec

# The form fields OpenAI defines for each route (the SDK sends list fields as `name[]`).
TRANSCRIPTION_FIELDS = frozenset(
    {
        "file",
        "model",
        "language",
        "prompt",
        "response_format",
        "temperature",
        "timestamp_granularities",
        "stream",
        "chunking_strategy",
        "include",
        "known_speaker_names",
        "known_speaker_references",
    }
)
TRANSLATION_FIELDS = frozenset({"file", "model", "prompt", "response_format", "temperature"})
ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
RESPONSE_FORMATS: tuple[str, ...] = ("json", "text", "srt", "verbose_json", "vtt")
GRANULARITIES = ("word", "segment")


class DurationUsage(msgspec.Struct, frozen=True, tag_field="type", tag="duration"):
    """What the clip cost, as OpenAI bills Whisper: its seconds of audio."""

    seconds: float


class Transcription(msgspec.Struct, frozen=True):
    """`response_format: json` (the default)."""

    text: str
    usage: DurationUsage


class Word(msgspec.Struct, frozen=True):
    word: str
    start: float
    end: float


class Segment(msgspec.Struct, frozen=True):
    id: int
    seek: int  # the window's start, in 10 ms frames, as openai-whisper reports it
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float


class VerboseTranscription(msgspec.Struct, frozen=True, omit_defaults=True):
    """`response_format: verbose_json`: segments (and words, where
    `timestamp_granularities` asks) with their times from the clip's start."""

    task: Literal["transcribe", "translate"]
    language: str  # its English name ("english"), as OpenAI answers
    duration: float
    text: str
    usage: DurationUsage
    segments: list[Segment] | None = None
    words: list[Word] | None = None


class TranscriptTextDelta(
    msgspec.Struct, frozen=True, tag_field="type", tag="transcript.text.delta"
):
    """`stream: true`: the next piece of the text (a segment's), as it is decoded."""

    delta: str


class TranscriptTextDone(msgspec.Struct, frozen=True, tag_field="type", tag="transcript.text.done"):
    """`stream: true`: the last event, the whole text and what it cost (as `json`'s)."""

    text: str
    usage: DurationUsage


# Text to speech: `POST /v1/audio/speech` takes JSON.
SPEECH_FORMATS: tuple[str, ...] = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MAX_SPEECH_INPUT = 4096  # characters, as OpenAI bounds `input`
SPEECH_CONTENT_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",  # Opus in Ogg pages
    "aac": "audio/aac",  # ADTS frames
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",  # signed 16-bit little-endian, mono, at the model's rate
}


class VoiceId(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A voice named as an object (`{"id": "af_heart"}`), as the SDK sends a custom one."""

    id: str


class SpeechBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """OpenAI's speech request; a field it does not define is refused by name."""

    model: str
    input: str
    voice: str | VoiceId
    response_format: Literal["mp3", "opus", "aac", "flac", "wav", "pcm"] = "mp3"
    speed: float = 1.0
    stream_format: Literal["audio", "sse"] = "audio"
    instructions: str | None = None

    @property
    def voice_name(self) -> str:
        return self.voice if isinstance(self.voice, str) else self.voice.id


class SpeechUsage(msgspec.Struct, frozen=True):
    """`speech.audio.done`'s usage: phoneme ids read in, duration frames predicted out."""

    input_tokens: int
    output_tokens: int
    total_tokens: int


class SpeechAudioDelta(msgspec.Struct, frozen=True, tag_field="type", tag="speech.audio.delta"):
    """`stream_format: sse`: the next piece of audio, base64, in `response_format`."""

    audio: str


class SpeechAudioDone(msgspec.Struct, frozen=True, tag_field="type", tag="speech.audio.done"):
    """`stream_format: sse`: the last event, what the speech cost."""

    usage: SpeechUsage


class VoiceEntry(msgspec.Struct, frozen=True):
    """One voice of `GET /v1/audio/voices`: its name, the model that reads it, the language
    its text is phonemized in."""

    id: str
    model: str
    language: str
    object: str = "voice"


class VoiceList(msgspec.Struct, frozen=True):
    data: list[VoiceEntry]
    object: str = "list"
