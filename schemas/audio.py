"""OpenAI's audio routes on the wire: `POST /v1/audio/transcriptions` and
`/v1/audio/translations` take a multipart form (its fields are read by
gateway/audio/form.py); these are the JSON answers."""

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
