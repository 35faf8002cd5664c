"""Embeddings: OpenAI's `POST /v1/embeddings` and Ollama's `POST /api/embed`.

Both map to one canonical `EmbedRequest`, run on the model's runner like any job (FIFO,
cancelled when the client leaves), and map the one `Embedded` output back.
"""

from __future__ import annotations

import base64
import struct
import time

from litestar import Request, post

from engines.errors import BadRequest
from gateway.body import decode_body
from gateway.ollama_models import ollama_route
from gateway.ollama_options import keep
from gateway.registry import Generation, Route, announce
from gateway.streaming import unless_client_leaves
from schemas import embeddings as wire
from schemas.canonical import Embedded, EmbedRequest


def openai_inputs(value: str | list[str | int | list[int]]) -> list[str]:
    """The texts of an OpenAI `input`; token ids and empty strings are 400s naming the field."""
    texts = [value] if isinstance(value, str) else value
    for index, text in enumerate(texts):
        where = "$.input" if isinstance(value, str) else f"$.input[{index}]"
        if not isinstance(text, str):
            raise BadRequest(f"{where}: token-id inputs are not supported; send text")
        if not text:
            raise BadRequest(f"{where}: empty input; every input must hold text")
    return texts


def ollama_inputs(value: str | list[str]) -> list[str]:
    """The texts of an Ollama `input`: "" and [] mean none (load only); "" in a list is a 400."""
    if isinstance(value, str):
        return [value] if value else []
    for index, text in enumerate(value):
        if not text:
            raise BadRequest(f"$.input[{index}]: empty input; every input must hold text")
    return value


def float32_base64(vector: list[float]) -> str:
    """Little-endian float32 bytes in base64: what OpenAI sends and its clients decode."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


@post("/v1/embeddings", status_code=200)
async def openai_embeddings(request: Request, generation: Generation) -> wire.EmbeddingList:
    """One vector per input, as floats or base64 (`encoding_format`)."""
    data = await decode_body(request, wire.EmbeddingRequest)
    inputs = openai_inputs(data.input)
    route = _route(generation, data.model, "openai")
    embedded = await _embed(request, route, EmbedRequest(inputs=inputs), data.dimensions)
    encode = float32_base64 if data.encoding_format == "base64" else list
    return wire.EmbeddingList(
        data=[
            wire.Embedding(index=i, embedding=encode(vector))
            for i, vector in enumerate(embedded.vectors)
        ],
        model=route.served,
        usage=wire.EmbeddingUsage(
            prompt_tokens=embedded.prompt_tokens, total_tokens=embedded.prompt_tokens
        ),
    )


@post("/api/embed", status_code=200)
async def ollama_embed(request: Request, generation: Generation) -> wire.OllamaEmbedResponse:
    """Ollama's embed: `truncate: false` refuses inputs longer than the model's window."""
    started = time.perf_counter_ns()
    data = await decode_body(request, wire.OllamaEmbedRequest)
    inputs = ollama_inputs(data.input)
    route = ollama_route(generation, data.model, stream=False)
    _refuse_options(data.options)
    keep(route.runner, data.keep_alive)
    canonical = EmbedRequest(inputs=inputs, truncate=data.truncate)
    embedded = await _embed(request, route, canonical, data.dimensions)
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
    keep(route.runner, data.keep_alive)
    inputs = [data.prompt] if data.prompt else []
    embedded = await _embed(request, route, EmbedRequest(inputs=inputs), None)
    return wire.OllamaLegacyEmbedResponse(embedding=embedded.vectors[0] if embedded.vectors else [])


def _refuse_options(options: dict | None) -> None:
    """No Ollama option changes an embedding here: any that is set is refused by name."""
    for name, value in (options or {}).items():
        if value is not None:
            raise BadRequest(f"$.options.{name}: options do not apply to embeddings here")


def _route(generation: Generation, name: str, protocol: str) -> Route:
    return announce(generation.resolve(name), stream=False, protocol=protocol)


async def _embed(
    request: Request, route: Route, embed: EmbedRequest, dimensions: int | None
) -> Embedded:
    """Queue the job on the model's runner and wait for its one `Embedded` output."""
    runner = route.runner
    results = runner.results(runner.submit(embed))
    try:
        embedded = await unless_client_leaves(request, anext(results))
    finally:
        await results.aclose()
    size = len(embedded.vectors[0]) if embedded.vectors else None
    if dimensions is not None and size is not None and dimensions != size:
        raise BadRequest(
            f"$.dimensions: model {route.served!r} makes {size}-dimensional vectors "
            f"and cannot shorten them; omit dimensions or send {size}"
        )
    return embedded


ROUTES = [openai_embeddings, ollama_embed, ollama_legacy_embeddings]
