"""The admin's view of every key's batches: `GET /admin/batches` lists them with their
owner's label and progress, `POST /admin/batches/{id}/cancel` cancels any of them. Guarded
like the other admin routes (`server.admin_key`); each also answers under `/ui/api/`."""

from __future__ import annotations

from asyncio import to_thread

import msgspec
from litestar import Request, get, post

from engines.errors import BadRequest, NotCancellable, StoredNotFound
from gateway.batches.runner import BatchRunner
from gateway.batches.store import BatchStore
from gateway.ops.admin import ADMIN, ADMIN_GUARDS
from schemas.batches import Batch

LIST_MOST = 100


class OwnedBatch(msgspec.Struct, kw_only=True):
    owner: str  # the key's label ("" on a gateway without keys)
    batch: Batch


class AdminBatchList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[OwnedBatch]
    has_more: bool = False


def _store(request: Request) -> BatchStore:
    return request.app.state.batch_store


@get(["/admin/batches", "/ui/api/batches"], guards=ADMIN_GUARDS, opt=ADMIN)
async def list_all_batches(
    request: Request, after: str | None = None, limit: int = 20
) -> AdminBatchList:
    """Every key's batches, newest first, paged by `after`."""
    if not 1 <= limit <= LIST_MOST:
        raise BadRequest(f"limit {limit}: from 1 to {LIST_MOST}")
    found = await to_thread(_store(request).owned_batches, after, limit + 1)
    page = [OwnedBatch(owner=owner, batch=batch) for owner, batch in found[:limit]]
    return AdminBatchList(data=page, has_more=len(found) > limit)


@post(
    ["/admin/batches/{batch_id:str}/cancel", "/ui/api/batches/{batch_id:str}/cancel"],
    status_code=200,
    guards=ADMIN_GUARDS,
    opt=ADMIN,
)
async def cancel_any_batch(request: Request, batch_id: str) -> Batch:
    if await to_thread(_store(request).batch, None, batch_id) is None:
        raise StoredNotFound(f"No such batch: {batch_id!r}")
    runner: BatchRunner = request.app.state.batch_runner
    batch = await runner.cancel(batch_id)
    if batch.status not in ("cancelling", "cancelled"):
        raise NotCancellable(f"Cannot cancel a batch with status {batch.status!r}.")
    return batch


ROUTES = [list_all_batches, cancel_any_batch]
