"""OpenAI's Batch API: `POST /v1/batches`, `GET /v1/batches[/{id}]`, `POST
/v1/batches/{id}/cancel`. A batch is its key's alone: another key gets a 404. The work is
the runner's (gateway/batches/runner.py); these routes store, read and ask."""

from __future__ import annotations

import re
import uuid
from asyncio import to_thread

from litestar import Request, get, post

from engines.errors import BadRequest, NotCancellable
from gateway.batches.files import missing, owner, page_of, store_of
from gateway.batches.runner import BatchRunner
from gateway.batches.store import now
from gateway.http.auth import stored_owner
from gateway.http.body import decode_body
from schemas.batches import BATCH_ENDPOINTS, Batch, BatchCreate, BatchList
from schemas.config import DURATION_PATTERN, seconds

MAX_METADATA = 16  # pairs, as OpenAI bounds them
LIST_MOST = 100


def runner_of(request: Request) -> BatchRunner:
    return request.app.state.batch_runner


@post("/v1/batches", status_code=200)
async def create_batch(request: Request) -> Batch:
    """A batch of the lines of an uploaded `batch` file, queued to run (`validating`)."""
    data = await decode_body(request, BatchCreate)
    if data.endpoint not in BATCH_ENDPOINTS:
        raise BadRequest(f"$.endpoint {data.endpoint!r}: send one of {', '.join(BATCH_ENDPOINTS)}")
    if not re.fullmatch(DURATION_PATTERN, data.completion_window):
        raise BadRequest(
            f"$.completion_window {data.completion_window!r}: send a duration such as 24h"
        )
    if data.output_expires_after is not None:
        raise BadRequest("$.output_expires_after: output files are kept until deleted")
    if data.metadata is not None and len(data.metadata) > MAX_METADATA:
        raise BadRequest(f"$.metadata: at most {MAX_METADATA} pairs")
    key = owner(request)
    store = store_of(request)
    file = await to_thread(store.file, key, data.input_file_id)
    if file is None:
        raise missing("file", data.input_file_id)
    if file.purpose != "batch":
        raise BadRequest(
            f"$.input_file_id: file {file.id!r} has purpose {file.purpose!r}, not batch"
        )
    created = now()
    batch = Batch(
        id=f"batch_{uuid.uuid4().hex[:24]}",
        endpoint=data.endpoint,
        input_file_id=data.input_file_id,
        completion_window=data.completion_window,
        status="validating",
        created_at=created,
        expires_at=created + int(seconds(data.completion_window)),
        metadata=data.metadata,
    )
    await to_thread(store.add_batch, key, batch, stored_owner(request))
    runner_of(request).kick(batch.id)
    return batch


@get("/v1/batches")
async def list_batches(request: Request, after: str | None = None, limit: int = 20) -> BatchList:
    """The key's batches, newest first, paged by `after`."""
    if not 1 <= limit <= LIST_MOST:
        raise BadRequest(f"limit {limit}: from 1 to {LIST_MOST}")
    found = await to_thread(store_of(request).batches, owner(request), after, limit + 1)
    return page_of(found, limit, BatchList)


@get("/v1/batches/{batch_id:str}")
async def retrieve_batch(request: Request, batch_id: str) -> Batch:
    found = await to_thread(store_of(request).batch, owner(request), batch_id)
    if found is None:
        raise missing("batch", batch_id)
    return found


@post("/v1/batches/{batch_id:str}/cancel", status_code=200)
async def cancel_batch(request: Request, batch_id: str) -> Batch:
    """`cancelling` at once; `cancelled` once its lines in flight have been withdrawn."""
    found = await to_thread(store_of(request).batch, owner(request), batch_id)
    if found is None:
        raise missing("batch", batch_id)
    batch = await runner_of(request).cancel(batch_id)
    if batch.status not in ("cancelling", "cancelled"):
        raise NotCancellable(f"Cannot cancel a batch with status {batch.status!r}.")
    return batch


ROUTES = [create_batch, list_batches, retrieve_batch, cancel_batch]
