"""The audio routes' multipart form, read and checked: every field OpenAI defines either
takes effect or is a 400 naming it; a field it does not define is a 400 too.

The body is bounded before it is parsed (limits.max_body_bytes, gateway/http/limits.py: a
413 while it streams in), so the file read here is never larger than that; it is decoded
on the model's thread (engines/speech), never on the event loop.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from litestar import Request
from litestar.datastructures import UploadFile
from litestar.exceptions import ClientException

from engines.errors import BadRequest, UnsupportedMediaType
from schemas import audio as wire
from schemas.canonical import TranscribeRequest
from schemas.config import seconds


class AudioForm(NamedTuple):
    """What the route needs beyond the canonical request: whom to send it to and how to
    write the answer."""

    model: str
    response_format: str
    granularities: frozenset[str]
    asked: TranscribeRequest
    stream: bool = False  # answer as server-sent events (json or text only)


def _one(form, name: str) -> str | None:
    values = form.getall(name, [])
    if len(values) > 1:
        raise BadRequest(f"{name}: sent {len(values)} times; send it once")
    if not values:
        return None
    value = values[0]
    if isinstance(value, UploadFile):
        raise BadRequest(f"{name}: a file was sent; send it as a plain form field")
    return value


async def read_form(request: Request, *, task: str) -> AudioForm:
    """The form of a transcription (`task` "transcribe") or a translation ("translate")."""
    declared = request.headers.get("content-type", "")
    if declared.partition(";")[0].strip().lower() != "multipart/form-data":
        raise UnsupportedMediaType(
            f"the audio routes take a multipart/form-data body with the audio as `file` (got "
            f"content-type {declared or 'none'!r}; with curl, -F file=@clip.wav -F model=…)"
        )
    try:
        form = await request.form()
    except ClientException as e:
        raise BadRequest(f"the multipart body does not parse: {e.detail}") from None
    allowed = wire.TRANSCRIPTION_FIELDS if task == "transcribe" else wire.TRANSLATION_FIELDS
    names = {k.removesuffix("[]") for k in form}
    unknown = sorted(names - allowed)
    if unknown:
        raise BadRequest(
            f"{unknown[0]}: not a field of /v1/audio/{task.replace('transcribe', 'transcription')}s"
            f"; it takes {', '.join(sorted(allowed))}"
        )
    files = form.getall("file", [])
    if not files:
        raise BadRequest("file: missing; send the audio file as the form's `file` part")
    if len(files) > 1 or not isinstance(files[0], UploadFile):
        raise BadRequest("file: send exactly one audio file, as a file part")
    model = _one(form, "model")
    if not model:
        raise BadRequest("model: missing; name a speech-to-text model (GET /v1/models)")
    response_format = _one(form, "response_format") or "json"
    if response_format not in wire.RESPONSE_FORMATS:
        raise BadRequest(
            f"response_format: {response_format!r} is not one of {', '.join(wire.RESPONSE_FORMATS)}"
        )
    temperature = _temperature(_one(form, "temperature"))
    granularities = _granularities(form, response_format)
    stream = _stream(_one(form, "stream"), response_format)
    _refuse_unhonoured(form)
    audio = await files[0].read()
    if not audio:
        raise BadRequest("file: the uploaded file is empty")
    language = _one(form, "language") if task == "transcribe" else None
    asked = TranscribeRequest(
        audio=audio,
        task="transcribe" if task == "transcribe" else "translate",
        language=language.strip().lower() if language else None,
        prompt=_one(form, "prompt") or None,
        temperature=temperature,
        words="word" in granularities,
        stream=stream,
        max_seconds=seconds(request.app.state.registry.current.config.server.limits.max_audio),
    )
    return AudioForm(model, response_format, granularities, asked, stream)


def _stream(raw: str | None, response_format: str) -> bool:
    """`stream`: true answers `transcript.text.delta` events, then `transcript.text.done`;
    as OpenAI, only for the json and text formats (timestamps come with the whole)."""
    if raw is None or raw.strip().lower() in ("", "false", "0"):
        return False
    if raw.strip().lower() not in ("true", "1"):
        raise BadRequest(f"stream: {raw!r} is not a boolean; send true or false")
    if response_format not in ("json", "text"):
        raise BadRequest(
            f"stream: a streamed transcription comes as json or text, not response_format "
            f"{response_format!r}; send stream=false for {response_format}"
        )
    return True


def _temperature(raw: str | None) -> float | None:
    if raw is None or raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadRequest(f"temperature: {raw!r} is not a number") from None
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise BadRequest(f"temperature: {raw} is outside 0 to 1")
    return value


def _granularities(form, response_format: str) -> frozenset[str]:
    sent = [
        *form.getall("timestamp_granularities[]", []),
        *form.getall("timestamp_granularities", []),
    ]
    for value in sent:
        if value not in wire.GRANULARITIES:
            raise BadRequest(
                f"timestamp_granularities: {value!r} is not one of {', '.join(wire.GRANULARITIES)}"
            )
    if sent and response_format != "verbose_json":
        raise BadRequest(
            "timestamp_granularities: timestamps come only with response_format verbose_json"
        )
    return frozenset(sent) or frozenset({"segment"})


def _refuse_unhonoured(form) -> None:
    """OpenAI's fields this gateway does not serve: a 400 naming each, never ignored."""
    chunking = _one(form, "chunking_strategy")
    if chunking is not None and chunking != "auto":
        raise BadRequest(
            "chunking_strategy: only 'auto' (Whisper's own 30 s windows) is served here"
        )
    if form.getall("include[]", []) or form.getall("include", []):
        raise BadRequest("include: logprobs of a transcription are not served here")
    for name in ("known_speaker_names", "known_speaker_references"):
        if form.getall(f"{name}[]", []) or form.getall(name, []):
            raise BadRequest(f"{name}: speaker diarization is not served here")
