"""`POST /v1/audio/speech` (text read aloud, streamed as it is generated) and
`GET /v1/audio/voices` (the voices of the speech models).

Speech is one job on the model's runner (FIFO, per-key limits, withdrawn when the client
leaves, which stops it at the next sentence). The status waits for the first piece of
audio: a failure before it (an unknown voice, a full queue, a model that fails to load) is
that status with OpenAI's JSON error body. With `stream_format: audio` the body is the
encoded audio, each sentence's bytes written as they are made; a failure after the first
piece cuts the body short (a client reading it sees the connection end early, never a
truncated file passed off as whole). With `stream_format: sse` each piece is a
`speech.audio.delta` event (base64), then `speech.audio.done` with the usage; a failure
after the first is OpenAI's error body as the last event.
"""

from __future__ import annotations

import base64
import math
from collections.abc import AsyncIterator

import msgspec
from litestar import Request, get, post

from engines.errors import BadRequest, ModelNotFound
from gateway.control.registry import Generation, Route, announce
from gateway.http.body import decode_body
from gateway.http.request_state import client_of
from gateway.http.streaming import Streamed, sse_response, started
from schemas import audio as wire
from schemas.canonical import AudioChunk, SpeechRequest, Spoken


def _speech_models(generation: Generation) -> list[str]:
    return [
        m.id
        for m in generation.listed()
        if (r := generation.runners.get(m.id)) and r.engine.capabilities.speech
    ]


def _route(generation: Generation, name: str) -> Route:
    """The model named; a name nobody serves is a 404 here even where `server.fallback`
    names a chat model, which could only refuse the text."""
    route = generation.resolve(name)
    if route.fallback and not route.runner.engine.capabilities.speech:
        known = ", ".join(_speech_models(generation)) or "none"
        raise ModelNotFound(f"model {name!r} not found; text-to-speech models: {known}")
    return route


def _asked(body: wire.SpeechBody, request: Request) -> SpeechRequest:
    """The canonical request, every field OpenAI defines either honoured or refused."""
    if not body.input.strip():
        raise BadRequest("input: empty; send the text to read aloud")
    if len(body.input) > wire.MAX_SPEECH_INPUT:
        raise BadRequest(
            f"input: {len(body.input)} characters, past the {wire.MAX_SPEECH_INPUT} one "
            "request reads; split the text"
        )
    if not (math.isfinite(body.speed) and 0.25 <= body.speed <= 4.0):
        raise BadRequest(f"speed: {body.speed} is outside 0.25 to 4.0")
    if not body.voice_name:
        raise BadRequest("voice: empty; GET /v1/audio/voices lists the voices")
    if body.instructions:
        raise BadRequest(
            f"instructions: model {body.model!r} (Kokoro) does not take instructions: its "
            "voice is chosen by `voice` alone and its pace by `speed`; leave it out"
        )
    return SpeechRequest(
        text=body.input,
        voice=body.voice_name,
        speed=body.speed,
        response_format=body.response_format,
        client=client_of(request),
    )


@post("/v1/audio/speech", status_code=200)
async def speech(request: Request, generation: Generation) -> Streamed:
    """The text read aloud in `voice`, encoded as `response_format`, streamed sentence by
    sentence as it is generated (or as SSE events with `stream_format: sse`)."""
    body = await decode_body(request, wire.SpeechBody)
    asked = _asked(body, request)
    route = announce(_route(generation, body.model), stream=True, protocol="openai")
    runner = route.runner
    results = runner.results(runner.submit(asked))
    outputs = await started(request, results)  # the first piece, or the failure's status
    if body.stream_format == "sse":
        return sse_response(request, _events(outputs), _error_event, outputs.aclose)
    media = wire.SPEECH_CONTENT_TYPES[body.response_format]
    return Streamed(_audio(outputs), media_type=media, headers={"Cache-Control": "no-cache"})


async def _audio(outputs: AsyncIterator) -> AsyncIterator[bytes]:
    """The audio's bytes as they come. A failure after the first is raised, so the server
    ends the response without its last chunk: the client sees it cut short."""
    try:
        async for output in outputs:
            if isinstance(output, AudioChunk):
                yield output.data
            elif isinstance(output, Spoken):
                return
    finally:
        await outputs.aclose()


async def _events(outputs: AsyncIterator) -> AsyncIterator[str]:
    async for output in outputs:
        if isinstance(output, AudioChunk):
            audio = base64.b64encode(output.data).decode()
            yield msgspec.json.encode(wire.SpeechAudioDelta(audio=audio)).decode()
        elif isinstance(output, Spoken):
            usage = wire.SpeechUsage(
                input_tokens=output.input_tokens,
                output_tokens=output.output_tokens,
                total_tokens=output.input_tokens + output.output_tokens,
            )
            yield msgspec.json.encode(wire.SpeechAudioDone(usage=usage)).decode()
            return


def _error_event(status: int, message: str, kind: str) -> str:
    """A failure after the 200 went out: OpenAI's error body as the last event."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return msgspec.json.encode(body).decode()


@get("/v1/audio/voices")
async def voices(generation: Generation, model: str | None = None) -> wire.VoiceList:
    """The voices of the speech model named by `?model=`, or of every speech model."""
    if model is None:
        names = _speech_models(generation)
    else:
        route = _route(generation, model)
        if not route.runner.engine.capabilities.speech:
            task = route.runner.engine.capabilities.task
            raise BadRequest(
                f"model {model!r} is a {task} model; it has no voices: name a `task: speech` model"
            )
        names = [route.runner.model.id]
    entries = [
        wire.VoiceEntry(id=v.name, model=name, language=v.language)
        for name in names
        for v in generation.runners[name].engine.voices()
    ]
    return wire.VoiceList(data=entries)


ROUTES = [speech, voices]
