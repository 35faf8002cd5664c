"""Ollama's embedding routes: `POST /api/embed` and the older `POST /api/embeddings`."""

from __future__ import annotations

import time

from litestar import Request, post

from engines.errors import BadRequest
from gateway.canonical.embedding import embed
from gateway.control.registry import Generation
from gateway.http.body import decode_body
from gateway.ollama.models import ollama_route
from gateway.ollama.options import keep
from schemas import embeddings as wire
from schemas.canonical import EmbedRequest


def ollama_inputs(value: str | list[str]) -> list[str]:
    """The texts of an Ollama `input`: "" and [] mean none (load only); "" in a list is a 400."""
    if isinstance(value, str):
        return [value] if value else []
    for index, text in enumerate(value):
        if not text:
            raise BadRequest(f"$.input[{index}]: empty input; every input must hold text")
    return value


@post("/api/embed", status_code=200)
async def ollama_embed(request: Request, generation: Generation) -> wire.OllamaEmbedResponse:
    """Ollama's embed: `truncate: false` refuses inputs longer than the model's window."""
    started = time.perf_counter_ns()
    data = await decode_body(request, wire.OllamaEmbedRequest)
    inputs = ollama_inputs(data.input)
    route = ollama_route(generation, data.model, stream=False)
    _refuse_options(data.options)
    await keep(route.runner, data.keep_alive)
    canonical = EmbedRequest(inputs=inputs, truncate=data.truncate)
    embedded = await embed(request, route, canonical, data.dimensions)
    return wire.OllamaEmbedResponse(
        model=route.served,
        embeddings=embedded.vectors,
        total_duration=time.perf_counter_ns() - started,
        load_duration=0,  # a model loads in its runner before the request runs, not here
        prompt_eval_count=embedded.prompt_tokens,
    )


@post("/api/embeddings", status_code=200)
async def ollama_legacy_embeddings(
    request: Request, generation: Generation
) -> wire.OllamaLegacyEmbedResponse:
    """Ollama's older embeddings route (LangChain's and llm-ollama's older clients call it):
    `prompt` in, `embedding` out; an empty prompt loads the model and answers `[]`."""
    data = await decode_body(request, wire.OllamaLegacyEmbedRequest)
    route = ollama_route(generation, data.model, stream=False)
    _refuse_options(data.options)
    await keep(route.runner, data.keep_alive)
    inputs = [data.prompt] if data.prompt else []
    embedded = await embed(request, route, EmbedRequest(inputs=inputs), None)
    return wire.OllamaLegacyEmbedResponse(embedding=embedded.vectors[0] if embedded.vectors else [])


def _refuse_options(options: dict | None) -> None:
    """No Ollama option changes an embedding here: any that is set is refused by name."""
    for name, value in (options or {}).items():
        if value is not None:
            raise BadRequest(f"$.options.{name}: options do not apply to embeddings here")


ROUTES = [ollama_embed, ollama_legacy_embeddings]
