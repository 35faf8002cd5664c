"""OpenAI's Files API: `POST /v1/files` (multipart), `GET /v1/files[/{id}[/content]]`,
`DELETE /v1/files/{id}`. Every file is its key's alone: another key gets a 404."""

from __future__ import annotations

from asyncio import to_thread
from typing import Literal

from litestar import Request, Response, delete, get, post
from litestar.datastructures import UploadFile

from engines.errors import BadRequest, PayloadTooLarge, StoredNotFound
from gateway.batches.runner import file_id
from gateway.batches.store import BatchStore, now, owner_of
from gateway.http.request_state import client_of
from schemas.batches import UPLOAD_PURPOSES, FileDeleted, FileList, FileObject
from schemas.config import size_bytes

FORM_FIELDS = {"file", "purpose"}
LIST_LIMIT = 10_000  # OpenAI's default and most for one page of files


def page_of(found: list, limit: int, page_type):
    """OpenAI's list page of `found`, read `limit + 1` long: the one past `limit` says
    there is more."""
    page = found[:limit]
    return page_type(
        data=page,
        first_id=page[0].id if page else None,
        last_id=page[-1].id if page else None,
        has_more=len(found) > limit,
    )


def store_of(request: Request) -> BatchStore:
    return request.app.state.batch_store


def owner(request: Request) -> str:
    """Whose files the request sees: its key's (the guard's label), "" without keys."""
    return owner_of(client_of(request).key)


def missing(what: str, ident: str) -> StoredNotFound:
    return StoredNotFound(f"No such {what}: {ident!r}")


@post("/v1/files", status_code=200)
async def create_file(request: Request) -> FileObject:
    """Upload one file (`file`, `purpose: batch`), bounded by
    `server.files.max_file_bytes` alone and `server.files.max_bytes` all together."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise BadRequest("POST /v1/files takes multipart/form-data with `file` and `purpose`")
    form = await request.form()
    unknown = sorted(set(form.keys()) - FORM_FIELDS)
    if unknown:
        raise BadRequest(f"{', '.join(unknown)}: not supported on uploads (file, purpose only)")
    purpose = form.get("purpose")
    if purpose not in UPLOAD_PURPOSES:
        raise BadRequest(
            f"purpose {purpose!r}: send one of {', '.join(UPLOAD_PURPOSES)} (files are read "
            "as batch inputs only)"
        )
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise BadRequest("file: send the file's content as a multipart file part")
    limits = request.app.state.registry.current.config.server.files
    content = await upload.read()
    if len(content) > size_bytes(limits.max_file_bytes):
        raise PayloadTooLarge(
            f"the file's {len(content)} bytes exceed {limits.max_file_bytes} "
            "(server.files.max_file_bytes)"
        )
    file = FileObject(
        id=file_id(),
        bytes=len(content),
        created_at=now(),
        filename=upload.filename or "upload",
        purpose=purpose,
    )
    cap = size_bytes(limits.max_bytes)
    await to_thread(
        store_of(request).add_file, owner(request), file, content, cap, limits.max_bytes
    )
    return file


@get("/v1/files")
async def list_files(
    request: Request,
    purpose: str | None = None,
    limit: int = LIST_LIMIT,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> FileList:
    """The key's files, newest first unless `order=asc`, paged by `after`."""
    if not 1 <= limit <= LIST_LIMIT:
        raise BadRequest(f"limit {limit}: from 1 to {LIST_LIMIT}")
    found = await to_thread(
        store_of(request).files, owner(request), purpose, after, limit + 1, order == "desc"
    )
    return page_of(found, limit, FileList)


@get("/v1/files/{file_id:str}")
async def retrieve_file(request: Request, file_id: str) -> FileObject:
    found = await to_thread(store_of(request).file, owner(request), file_id)
    if found is None:
        raise missing("file", file_id)
    return found


@get("/v1/files/{file_id:str}/content")
async def file_content(request: Request, file_id: str) -> Response:
    content = await to_thread(store_of(request).content, owner(request), file_id)
    if content is None:
        raise missing("file", file_id)
    return Response(content, media_type="application/octet-stream")


@delete("/v1/files/{file_id:str}", status_code=200)
async def delete_file(request: Request, file_id: str) -> FileDeleted:
    if not await to_thread(store_of(request).delete_file, owner(request), file_id):
        raise missing("file", file_id)
    return FileDeleted(id=file_id)


ROUTES = [create_file, list_files, retrieve_file, file_content, delete_file]
