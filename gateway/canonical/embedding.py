"""An embedding job on the model's runner, shared by OpenAI's and Ollama's embedding routes.

Both protocols map to one canonical `EmbedRequest`, run on the model's runner like any job
(FIFO, cancelled when the client leaves), and map the one `Embedded` output back.
"""

from __future__ import annotations

from litestar import Request
from msgspec.structs import replace

from engines.errors import DimensionsUnavailable
from gateway.control.registry import Route
from gateway.http.request_state import client_of
from gateway.http.streaming import unless_client_leaves
from schemas.canonical import Embedded, EmbedRequest


async def embed(
    request: Request, route: Route, embed: EmbedRequest, dimensions: int | None
) -> Embedded:
    """Queue the job on the model's runner and wait for its one `Embedded` output.

    A `dimensions` the model cannot give is refused before the job queues when the model's
    size is known (it has loaded), else by the engine before it reads any input.
    """
    runner = route.runner
    known = runner.dimensions
    if dimensions is not None and known is not None and dimensions != known:
        raise DimensionsUnavailable(route.served, known)
    asked = replace(embed, dimensions=dimensions, client=client_of(request))
    results = runner.results(runner.submit(asked))
    try:
        embedded = await unless_client_leaves(request, anext(results))
    finally:
        await results.aclose()
    size = len(embedded.vectors[0]) if embedded.vectors else None
    if dimensions is not None and size is not None and dimensions != size:
        raise DimensionsUnavailable(route.served, size)  # an engine that does not check
    return embedded
