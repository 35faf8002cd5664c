"""`POST /rerank`, `/v1/rerank` (Jina's and Cohere's v1 shape) and `/v2/rerank` (Cohere's
v2): the documents' relevance to the query, best first."""

from __future__ import annotations

import uuid

from litestar import Request, post

from gateway.control.registry import Generation, announce
from gateway.http.body import decode_body
from gateway.rerank.job import canonical, rerank, results
from schemas import rerank as wire


def _meta(version: str, tokens: int) -> wire.RerankMeta:
    return wire.RerankMeta(
        api_version=wire.ApiVersion(version=version),
        billed_units=wire.BilledUnits(),
        tokens=wire.MetaTokens(input_tokens=tokens),
    )


@post(["/rerank", "/v1/rerank"], status_code=200)
async def rerank_v1(request: Request, generation: Generation) -> wire.RerankResponse:
    """Jina's and Cohere's v1 rerank: results best first, with the documents' text when
    `return_documents` is true."""
    data = await decode_body(request, wire.RerankRequest)
    asked = canonical(data)
    route = announce(generation.resolve(data.model), stream=False, protocol="rerank")
    ranked = await rerank(request, route, asked, data.top_n)
    return wire.RerankResponse(
        id=str(uuid.uuid4()),
        model=route.served,
        results=results(ranked, documents=data.return_documents),
        usage=wire.RerankUsage(total_tokens=ranked.prompt_tokens),
        meta=_meta("1", ranked.prompt_tokens),
    )


@post("/v2/rerank", status_code=200)
async def rerank_v2(request: Request, generation: Generation) -> wire.RerankV2Response:
    """Cohere's v2 rerank: results best first, index and score alone (the documents' text
    too only when `return_documents` is sent, which Cohere's v2 does not)."""
    data = await decode_body(request, wire.RerankV2Request)
    asked = canonical(data)
    route = announce(generation.resolve(data.model), stream=False, protocol="rerank")
    ranked = await rerank(request, route, asked, data.top_n)
    return wire.RerankV2Response(
        id=str(uuid.uuid4()),
        results=results(ranked, documents=data.return_documents),
        meta=_meta("2", ranked.prompt_tokens),
    )


ROUTES = [rerank_v1, rerank_v2]
