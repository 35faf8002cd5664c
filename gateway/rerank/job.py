"""A rerank job on the model's runner: the wire request checked and made canonical, queued
like any job (FIFO, cancelled when the client leaves), and its scores ranked."""

from __future__ import annotations

from typing import NamedTuple

from litestar import Request
from msgspec.structs import replace

from engines.errors import BadRequest, PayloadTooLarge
from gateway.control.registry import Route
from gateway.http.request_state import client_of
from gateway.http.streaming import unless_client_leaves
from schemas import rerank as wire
from schemas.canonical import Reranked, RerankRequest


class Ranked(NamedTuple):
    """The documents' places, best first (`top_n` of them), and what scoring cost."""

    order: list[int]
    scores: list[float]
    texts: list[str]
    prompt_tokens: int


def canonical(data: wire.RerankRequest | wire.RerankV2Request) -> RerankRequest:
    """The canonical request; a 400 naming what is missing or over a cap."""
    if not data.query:
        raise BadRequest("$.query: no query; send the text the documents are ranked against")
    if not data.documents:
        raise BadRequest("$.documents: no documents; send at least one to rank")
    if len(data.documents) > wire.MAX_DOCUMENTS:
        raise BadRequest(
            f"$.documents: {len(data.documents)} documents; at most {wire.MAX_DOCUMENTS} "
            "per request: split them"
        )
    texts = [d if isinstance(d, str) else d.text for d in data.documents]
    size = len(data.query.encode()) + sum(len(t.encode()) for t in texts)
    if size > wire.MAX_TEXT_BYTES:
        raise PayloadTooLarge(
            f"query and documents hold {size} bytes of text; at most {wire.MAX_TEXT_BYTES} "
            "per request: split them"
        )
    return RerankRequest(
        query=data.query, documents=texts, max_tokens_per_doc=data.max_tokens_per_doc
    )


async def rerank(request: Request, route: Route, asked: RerankRequest, top_n: int | None) -> Ranked:
    """Queue the job on the model's runner, wait for its one `Reranked`, rank its scores."""
    runner = route.runner
    job = runner.submit(_with_client(asked, request))
    results = runner.results(job)
    try:
        reranked: Reranked = await unless_client_leaves(request, anext(results))
    finally:
        await results.aclose()
    scores = reranked.scores
    # Best first; equal scores keep the documents' order (sorted is stable).
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[:top_n]
    return Ranked(order, scores, asked.documents, reranked.prompt_tokens)


def results(ranked: Ranked, *, documents: bool) -> list[wire.RerankResult]:
    """The ranked results on the wire, each document's text with it when asked."""
    return [
        wire.RerankResult(
            index=i,
            relevance_score=ranked.scores[i],
            document=wire.ResultDocument(text=ranked.texts[i]) if documents else None,
        )
        for i in ranked.order
    ]


def _with_client(asked: RerankRequest, request: Request) -> RerankRequest:
    return replace(asked, client=client_of(request))
