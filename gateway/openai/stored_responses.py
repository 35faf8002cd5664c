"""The stored Responses' own routes: `GET`/`DELETE /v1/responses/{id}` and
`GET /v1/responses/{id}/input_items`, each answering only the API key that stored it."""

from __future__ import annotations

from asyncio import to_thread
from typing import Literal

from litestar import Request, Response, delete, get

from engines.errors import StoredNotFound
from gateway.http.auth import stored_owner
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


@get("/v1/responses/{response_id:str}")
async def retrieve_response(request: Request, response_id: str) -> Response:
    """A stored response as it finished."""
    found = await to_thread(store_of(request).response, _owner(request), response_id)
    if found is None:
        raise _missing(response_id)
    return Response(found)


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(request: Request, response_id: str) -> wire.DeletedResponse:
    """Delete a stored response and its items."""
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


ROUTES = [retrieve_response, delete_response, input_items]
