"""A transcript written in the `response_format` asked: json, text, verbose_json, srt, vtt."""

from __future__ import annotations

import msgspec
from litestar import Response

from schemas import audio as wire
from schemas.canonical import Transcribed


def _clock(seconds: float, decimal: str) -> str:
    ms = round(seconds * 1000)
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{decimal}{ms:03d}"


def srt(done: Transcribed) -> str:
    """SubRip: numbered cues, `HH:MM:SS,mmm --> HH:MM:SS,mmm`, a blank line after each."""
    return "".join(
        f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n\n"
        for i, s in enumerate(done.segments, 1)
    )


def vtt(done: Transcribed) -> str:
    """WebVTT: the header, then `HH:MM:SS.mmm --> HH:MM:SS.mmm` cues."""
    cues = "".join(
        f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n\n"
        for s in done.segments
    )
    return "WEBVTT\n\n" + cues


def verbose(
    done: Transcribed, task: str, granularities: frozenset[str]
) -> wire.VerboseTranscription:
    segments = None
    if "segment" in granularities:
        segments = [
            wire.Segment(
                id=s.id,
                seek=s.seek,
                start=s.start,
                end=s.end,
                text=s.text,
                tokens=s.tokens,
                temperature=s.temperature,
                avg_logprob=s.avg_logprob,
                compression_ratio=s.compression_ratio,
                no_speech_prob=s.no_speech_prob,
            )
            for s in done.segments
        ]
    words = None
    if "word" in granularities:
        words = [
            wire.Word(word=w.word.strip(), start=w.start, end=w.end)
            for s in done.segments
            for w in s.words
        ]
    return wire.VerboseTranscription(
        task="translate" if task == "translate" else "transcribe",
        language=done.language,
        duration=round(done.audio_seconds, 3),
        text=done.text,
        usage=wire.DurationUsage(seconds=round(done.audio_seconds, 3)),
        segments=segments,
        words=words,
    )


def deltas(done: Transcribed) -> list[str]:
    """The text of a streamed transcription in pieces, one a segment, that join into
    `done.text` exactly (the first's leading and the last's trailing space dropped, as the
    whole text drops them); one piece where the segments do not make up the text."""
    pieces = [s.text for s in done.segments if s.text]
    if not pieces or "".join(pieces).strip() != done.text:
        return [done.text] if done.text else []
    pieces[0] = pieces[0].lstrip()
    pieces[-1] = pieces[-1].rstrip()
    return [p for p in pieces if p]


def events(done: Transcribed) -> list[str]:
    """`stream: true`'s events as JSON, in order: a `transcript.text.delta` for each piece,
    then `transcript.text.done` with the whole text and `usage` (the json format's)."""
    usage = wire.DurationUsage(seconds=round(done.audio_seconds, 3))
    frames: list[wire.TranscriptTextDelta | wire.TranscriptTextDone] = [
        wire.TranscriptTextDelta(delta=piece) for piece in deltas(done)
    ]
    frames.append(wire.TranscriptTextDone(text=done.text, usage=usage))
    return [msgspec.json.encode(f).decode() for f in frames]


def render(
    done: Transcribed, response_format: str, task: str, granularities: frozenset[str]
) -> Response:
    """The route's answer: JSON for json and verbose_json, plain text for text, srt, vtt."""
    if response_format in ("json", "verbose_json"):
        body = (
            verbose(done, task, granularities)
            if response_format == "verbose_json"
            else wire.Transcription(
                text=done.text, usage=wire.DurationUsage(seconds=round(done.audio_seconds, 3))
            )
        )
        return Response(msgspec.json.encode(body), media_type="application/json")
    if response_format == "text":
        return Response(done.text + "\n", media_type="text/plain; charset=utf-8")
    body = srt(done) if response_format == "srt" else vtt(done)
    media = "application/x-subrip" if response_format == "srt" else "text/vtt"
    return Response(body, media_type=f"{media}; charset=utf-8")
