"""Rerank wire formats: Jina's and Cohere's v1 (`/rerank`, `/v1/rerank`) and Cohere's v2
(`/v2/rerank`).

Lenient like every wire struct (unknown fields are ignored), strict on the fields we read:
a wrong type or a `top_n` below 1 fails decoding with a message naming the field. The caps
(`MAX_DOCUMENTS`, `MAX_TEXT_BYTES`) are checked by the route, which names them.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from schemas.wire import Wire

# Documents per request: Cohere's own recommended limit; it bounds the work one request
# queues (1,000 documents of a 512-token window are ~0.5 M tokens).
MAX_DOCUMENTS = 1000
# Query and documents' text together, in UTF-8 bytes (the body limit applies first).
MAX_TEXT_BYTES = 4 * 1024 * 1024

ModelName = Annotated[str, Meta(min_length=1)]
TopN = Annotated[int, Meta(ge=1)]
TokensPerDoc = Annotated[int, Meta(ge=1)]


class TextDocument(Wire, kw_only=True):
    """A document as an object: Cohere's and Jina's clients send `{"text": ...}`."""

    text: str


Document = str | TextDocument


class RerankRequest(Wire, kw_only=True):
    """Jina / Cohere v1: `return_documents` echoes each document's text in its result."""

    model: ModelName
    query: str
    documents: list[Document]
    top_n: TopN | None = None
    return_documents: bool = False
    max_tokens_per_doc: TokensPerDoc | None = None


class RerankV2Request(Wire, kw_only=True):
    """Cohere v2: documents are strings (objects with `text` are taken too); the results
    carry no documents unless `return_documents` is sent (Cohere's v2 has none)."""

    model: ModelName
    query: str
    documents: list[Document]
    top_n: TopN | None = None
    max_tokens_per_doc: TokensPerDoc | None = None
    return_documents: bool = False


class ResultDocument(Wire, kw_only=True):
    text: str


class RerankResult(Wire, kw_only=True, omit_defaults=True):
    index: int
    relevance_score: float
    document: ResultDocument | None = None


class RerankUsage(Wire, kw_only=True):
    total_tokens: int


class ApiVersion(Wire, kw_only=True):
    version: str


class BilledUnits(Wire, kw_only=True):
    search_units: int = 1  # Cohere bills one search per request of up to 100 documents


class MetaTokens(Wire, kw_only=True):
    input_tokens: int
    output_tokens: int = 0


class RerankMeta(Wire, kw_only=True):
    api_version: ApiVersion
    billed_units: BilledUnits
    tokens: MetaTokens


class RerankResponse(Wire, kw_only=True):
    """Jina's shape (`model`, `results`, `usage`) with Cohere v1's `id` and `meta`."""

    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage
    meta: RerankMeta


class RerankV2Response(Wire, kw_only=True):
    id: str
    results: list[RerankResult]
    meta: RerankMeta
