"""An embedding job on the model's runner, shared by OpenAI's and Ollama's embedding routes.

Both protocols map to one canonical `EmbedRequest`, run on the model's runner like any job
(FIFO, cancelled when the client leaves), and map the one `Embedded` output back.
"""

from __future__ import annotations

from litestar import Request

from engines.errors import BadRequest
from gateway.control.registry import Route
from gateway.http.streaming import unless_client_leaves
from schemas.canonical import Embedded, EmbedRequest


async def embed(
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
