"""`POST /v1/audio/transcriptions` and `/v1/audio/translations`: an audio file's text, on
the model's runner like an embedding (FIFO, per-key limits, cancelled when the client
leaves), written in the response format asked."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
from litestar import Request, Response, post
from msgspec.structs import replace

from engines.errors import ModelNotFound
from gateway.audio.form import read_form
from gateway.audio.formats import events, render
from gateway.control.registry import Generation, Route, announce
from gateway.http.request_state import client_of
from gateway.http.streaming import Streamed, sse_response, started, unless_client_leaves
from schemas import audio as wire
from schemas.canonical import TextDelta, Transcribed, TranscribeRequest


def _route(generation: Generation, name: str) -> Route:
    """The model named; a name nobody serves is a 404 here even where `server.fallback`
    names a chat model, which could only refuse the audio."""
    route = generation.resolve(name)
    if route.fallback and not route.runner.engine.capabilities.transcribe:
        known = [
            m.id
            for m in generation.listed()
            if (r := generation.runners.get(m.id)) and r.engine.capabilities.transcribe
        ]
        raise ModelNotFound(
            f"model {name!r} not found; speech-to-text models: {', '.join(known) or 'none'}"
        )
    return route


async def _answer(request: Request, generation: Generation, task: str) -> Response | Streamed:
    form = await read_form(request, task=task)
    route = announce(_route(generation, form.model), stream=form.stream, protocol="openai")
    asked: TranscribeRequest = replace(form.asked, client=client_of(request))
    runner = route.runner
    job = runner.submit(asked)
    results = runner.results(job)
    if form.stream:
        # The status waits for the transcript: a failure before it (a file that is not
        # audio, a full queue) is still that status with OpenAI's JSON error body.
        outputs = await started(request, results)
        return sse_response(request, _frames(outputs), _error_event, outputs.aclose)
    try:
        done: Transcribed = await unless_client_leaves(request, anext(results))
    finally:
        await results.aclose()
    return render(done, form.response_format, task, form.granularities)


async def _frames(outputs: AsyncIterator) -> AsyncIterator[str]:
    """A `transcript.text.delta` for each segment as its window is decoded, then
    `transcript.text.done`. Where none came ahead of the whole (an engine that hears no
    segments), the deltas are the finished transcript's segments."""
    sent: list[str] = []
    async for output in outputs:
        if isinstance(output, TextDelta):
            piece = output.text.lstrip() if not sent else output.text
            if piece:
                sent.append(piece)
                yield msgspec.json.encode(wire.TranscriptTextDelta(delta=piece)).decode()
        elif isinstance(output, Transcribed):
            if not sent:
                for frame in events(output):
                    yield frame
                return
            usage = wire.DurationUsage(seconds=round(output.audio_seconds, 3))
            done = wire.TranscriptTextDone(text=output.text, usage=usage)
            yield msgspec.json.encode(done).decode()
            return


def _error_event(status: int, message: str, kind: str) -> str:
    """A failure after the 200 went out: OpenAI's error body as the last event."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return msgspec.json.encode(body).decode()


@post("/v1/audio/transcriptions", status_code=200)
async def transcriptions(request: Request, generation: Generation) -> Response | Streamed:
    """The audio's text in its own language (or the one `language` names); `stream: true`
    answers it as server-sent events."""
    return await _answer(request, generation, "transcribe")


@post("/v1/audio/translations", status_code=200)
async def translations(request: Request, generation: Generation) -> Response | Streamed:
    """The audio's text in English, on a multilingual Whisper."""
    return await _answer(request, generation, "translate")


ROUTES = [transcriptions, translations]
