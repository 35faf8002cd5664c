"""The ops page: `/ui` (plain HTML/JS, no build step), its static files and its live event feed.

The page and its static files hold no data and are public (a browser cannot send a key
when it navigates); everything they show comes from routes behind a key: `/ui/api/`
(ui_api.py and its siblings), the feed `/ui/events` and the older `/ui/state` (both with
the admin key, as `/metrics`). `/health` stays public as ever.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import cache
from importlib.resources import files

import msgspec
from litestar import Request, Response, get
from litestar.datastructures import State
from litestar.response.sse import ServerSentEventMessage
from litestar.static_files import create_static_files_router

from engines.base import EngineState
from engines.job import arrived
from engines.runner import Runner
from gateway.http.streaming import SSE_HEADERS, Streamed, sse_bytes, stream_body
from gateway.ops.health import download_state
from gateway.ops.metrics import STATE_NAMES
from schemas.config import ModelConfig

STATIC_DIR = files("gateway") / "static"
PAGE_HEADERS = {
    # The page runs only its own script and talks only to this gateway.
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}
PUBLIC = {"public": True}
OPS = {"ops": True}


@cache
def _page() -> bytes:
    return (STATIC_DIR / "index.html").read_bytes()


@get("/ui", opt=PUBLIC, sync_to_thread=False)
def page() -> Response:
    """The ops page itself."""
    return Response(_page(), media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)


def _page_headers(response: Response) -> Response:
    response.headers.update(PAGE_HEADERS)
    return response


# The page's script and style sheet, through litestar's static-files router: it confines
# every path to the directory (no `..`, no symlinks out) and answers 404 for the rest.
static = create_static_files_router(
    "/ui/static",
    directories=[STATIC_DIR],
    opt=PUBLIC,
    after_request=_page_headers,
    name="ui-static",
)


def model_state(state: State, model: ModelConfig, runner: Runner) -> dict:
    """A model as the page shows it: load state, aliases, queue, recent tokens/s. Reads only."""
    return {
        "id": model.id,
        "state": STATE_NAMES[runner.state],
        "aliases": list(model.aliases),
        # Each a model id of its own, served by this runner (docs/adapters.md).
        "adapters": [a.id for a in model.adapters],
        "engine": model.engine,
        "residency": "pinned" if model.pinned else "on_demand",
        "queue_depth": runner.queue_depth,
        "running": runner.running,
        # Its recent decode speed while it is loaded: an unloaded model decodes nothing.
        "tokens_per_s": state.metrics.tokens_per_s(model.id)
        if runner.state is EngineState.READY
        else None,
        "error": runner.error,
        "download": download_state(runner),
    }


@get("/ui/state", opt=OPS, sync_to_thread=False)
def ui_state(state: State) -> dict:
    """Each model's state (the first page's route; `/ui/api/models` says more)."""
    generation = state.registry.current
    models = [model_state(state, m, generation.runners[m.id]) for m in generation.config.models]
    return {"draining": state.admission.draining, "models": models}


@get("/ui/events", opt=OPS, sync_to_thread=False)
def ui_events(state: State, request: Request | None = None) -> Streamed:
    """The live event feed: every log line as an SSE `data:` message, recent ones first.

    Through the stream helper, as every stream: the client watched (a page closed ends its
    subscription at once) and a failure said in an `error` event."""
    arrived()  # open for as long as the page is: not a request on its way to a model
    body = stream_body(request, _feed(state), _error_event, _no_cleanup, sse_bytes)
    # The headers litestar's ServerSentEvent response sent, with the feed's own.
    headers = {"cache-control": "no-cache", **SSE_HEADERS}
    return Streamed(body, media_type="text/event-stream", headers=headers)


def _error_event(status: int, message: str, kind: str) -> ServerSentEventMessage:
    data = msgspec.json.encode({"status": status, "message": message, "type": kind}).decode()
    return ServerSentEventMessage(event="error", data=data)


async def _no_cleanup() -> None:
    """Nothing to stop beyond the feed itself: closing it ends the subscription."""


async def _feed(state: State) -> AsyncIterator[ServerSentEventMessage]:
    reported = 0
    async for line, dropped in state.feed.subscribe():
        if dropped != reported:  # this browser fell behind: say how much it missed
            reported = dropped
            yield ServerSentEventMessage(event="dropped", data=str(dropped))
        if line is None:
            yield ServerSentEventMessage(comment="keep-alive")
        else:
            yield ServerSentEventMessage(event="log", data=line)


ROUTES = [page, static, ui_state, ui_events]
