"""The stored Responses' own routes: `GET`/`DELETE /v1/responses/{id}` (a background one's
stream again with `stream=true`, from after `starting_after`), `POST /v1/responses/{id}/cancel`
and `GET /v1/responses/{id}/input_items`, each answering only the API key that stored it."""

from __future__ import annotations

from asyncio import to_thread
from typing import Literal

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.response import ServerSentEventMessage, Stream

from engines.errors import BadRequest, StoredNotFound
from gateway.http.auth import stored_owner
from gateway.http.streaming import sse_response
from gateway.openai.background import BackgroundResponses
from gateway.openai.response_store import ResponseStore
from schemas import openai_responses as wire
from schemas.config import ServerConfig


def registry_server(request: Request) -> ServerConfig:
    """The server section in force now (TTL and size cap follow reloads)."""
    return request.app.state.registry.current.config.server


def store_of(request: Request) -> ResponseStore:
    """The process's store, opened at start in `server.state_dir` (see `create_app`)."""
    return request.app.state.responses_store


def _missing(response_id: str) -> StoredNotFound:
    return StoredNotFound(f"Response with id {response_id!r} not found.")


def _owner(request: Request) -> str:
    return stored_owner(request)


def _runs(request: Request) -> BackgroundResponses:
    return request.app.state.background_responses


@get("/v1/responses/{response_id:str}")
async def retrieve_response(
    request: Request, response_id: str, stream: bool = False, starting_after: int | None = None
) -> Response | Stream:
    """A stored response as it is now; a background one's events with `stream=true`."""
    if stream:
        events = await _runs(request).events(_owner(request), response_id, starting_after)

        def error_event(_status: int, message: str, kind: str) -> ServerSentEventMessage:
            return ServerSentEventMessage(event="error", data=error_data(kind, message))

        async def leave() -> None:
            return None  # the client's leaving stops nothing: the work is the background's

        return sse_response(request, events, error_event, leave)
    if starting_after is not None:
        raise BadRequest("starting_after is for stream=true")
    found = await to_thread(store_of(request).response, _owner(request), response_id)
    if found is None:
        raise _missing(response_id)
    return Response(found)


def error_data(kind: str, message: str) -> str:
    error = {"type": "error", "code": kind, "message": message, "sequence_number": -1}
    return msgspec.json.encode(error).decode()


@post("/v1/responses/{response_id:str}/cancel", status_code=200)
async def cancel_response(request: Request, response_id: str) -> Response:
    """Cancel a background response; one that ended is answered as it ended."""
    return Response(await _runs(request).cancel(_owner(request), response_id))


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(request: Request, response_id: str) -> wire.DeletedResponse:
    """Delete a stored response and its items (a background one still running: cancelled
    first)."""
    await _runs(request).withdraw(_owner(request), response_id)
    if not await to_thread(store_of(request).delete, _owner(request), response_id):
        raise _missing(response_id)
    return wire.DeletedResponse(id=response_id)


@get("/v1/responses/{response_id:str}/input_items")
async def input_items(
    request: Request,
    response_id: str,
    limit: int = 20,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> wire.InputItemList:
    """A stored response's input items, newest first unless `order=asc`, paged by `after`."""
    items = await to_thread(store_of(request).inputs, _owner(request), response_id)
    if items is None:
        raise _missing(response_id)
    if order == "desc":
        items = items[::-1]
    if after is not None:
        ids = [item.get("id") for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[: max(1, min(limit, 100))]
    return wire.InputItemList(
        data=page,
        first_id=page[0]["id"] if page else None,
        last_id=page[-1]["id"] if page else None,
        has_more=len(items) > len(page),
    )


ROUTES = [retrieve_response, cancel_response, delete_response, input_items]
