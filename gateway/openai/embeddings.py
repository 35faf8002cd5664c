"""OpenAI's `POST /v1/embeddings`: one vector per input, as floats or base64."""

from __future__ import annotations

import asyncio
import base64
import struct

from litestar import Request, post

from engines.errors import BadRequest
from gateway.canonical.embedding import embed
from gateway.control.registry import Generation, announce
from gateway.http.body import decode_body
from gateway.openai.token_ids import decode_token_ids
from schemas import embeddings as wire
from schemas.canonical import EmbedRequest


def openai_inputs(value: str | list[str | int | list[int]]) -> list[str]:
    """The texts of an OpenAI `input`: strings, or token ids (one list of ids, or a list of
    them) decoded as cl100k_base, OpenAI's; empty inputs are 400s naming the field."""
    one = isinstance(value, str) or all(isinstance(v, int) for v in value)  # text or ids
    texts = [value] if one else value
    decoded = []
    for index, text in enumerate(texts):
        where = "$.input" if one else f"$.input[{index}]"
        if isinstance(text, int):
            raise BadRequest(f"{where}: a token id among texts; send texts or lists of ids")
        if not text:
            raise BadRequest(f"{where}: empty input; every input must hold text")
        decoded.append(text if isinstance(text, str) else decode_token_ids(text, where))
    return decoded


def float32_base64(vector: list[float]) -> str:
    """Little-endian float32 bytes in base64: what OpenAI sends and its clients decode."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


@post("/v1/embeddings", status_code=200)
async def openai_embeddings(request: Request, generation: Generation) -> wire.EmbeddingList:
    """One vector per input, as floats or base64 (`encoding_format`)."""
    data = await decode_body(request, wire.EmbeddingRequest)
    if isinstance(data.input, str) or all(isinstance(text, str) for text in data.input):
        inputs = openai_inputs(data.input)
    else:  # token ids: off the event loop (the encoding's first load takes ~0.3 s)
        inputs = await asyncio.to_thread(openai_inputs, data.input)
    route = announce(generation.resolve(data.model), stream=False, protocol="openai")
    embedded = await embed(request, route, EmbedRequest(inputs=inputs), data.dimensions)
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


ROUTES = [openai_embeddings]
