"""Embedding wire formats: OpenAI's `/v1/embeddings` and Ollama's `/api/embed`.

Lenient like every wire struct (unknown fields are ignored), strict on the fields we read:
a wrong type, a non-positive `dimensions` or more than `MAX_INPUTS` inputs fail decoding
with a message naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta

from schemas.wire import Wire

# OpenAI's own limit on inputs per request; it also bounds the work one request queues.
MAX_INPUTS = 2048

ModelName = Annotated[str, Meta(min_length=1)]
Dimensions = Annotated[int, Meta(ge=1)]


class EmbeddingRequest(Wire, kw_only=True):
    """OpenAI: `input` is text, a list of texts, or token ids (cl100k_base's, decoded to text)."""

    model: ModelName
    input: str | Annotated[list[str | int | list[int]], Meta(min_length=1, max_length=MAX_INPUTS)]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Dimensions | None = None
    user: str | None = None


class Embedding(Wire, kw_only=True):
    object: Literal["embedding"] = "embedding"
    index: int
    # Floats, or base64 of the little-endian float32 bytes (`encoding_format: base64`).
    embedding: list[float] | str


class EmbeddingUsage(Wire, kw_only=True):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(Wire, kw_only=True):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class OllamaEmbedRequest(Wire, kw_only=True):
    """Ollama: an empty `input` ("" or []) only loads the model, as Ollama's own server does."""

    model: ModelName
    input: str | Annotated[list[str], Meta(max_length=MAX_INPUTS)] = ""
    truncate: bool = True
    dimensions: Dimensions | None = None
    options: dict[str, Any] | None = None  # any option set is refused: none applies here
    keep_alive: str | float | None = None


class OllamaLegacyEmbedRequest(Wire, kw_only=True):
    """Ollama's older `POST /api/embeddings`: one `prompt`, one vector; "" only loads."""

    model: ModelName
    prompt: str = ""
    options: dict[str, Any] | None = None
    keep_alive: str | float | None = None


class OllamaLegacyEmbedResponse(Wire, kw_only=True):
    embedding: list[float]


class OllamaEmbedResponse(Wire, kw_only=True):
    model: str
    embeddings: list[list[float]]
    total_duration: int  # nanoseconds, as Ollama counts
    load_duration: int
    prompt_eval_count: int
