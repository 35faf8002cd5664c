"""OpenAI's Files and Batch API on the wire: file objects, batch objects, their lists, and
the lines of a batch's input, output and error files."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# What a batch's `endpoint` (and every line's `url`) may be: the routes a line is run on.
BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
# What `purpose` an upload may give: inputs of batches. (`user_data`, files a Responses
# input names, is refused: no route reads an uploaded file as a model's input.)
UPLOAD_PURPOSES = ("batch",)


class FileObject(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["processed"] = "processed"
    expires_at: int | None = None
    status_details: str | None = None


class FileList(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class FileDeleted(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["file"] = "file"
    deleted: bool = True


class BatchCreate(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """`POST /v1/batches`: every field OpenAI defines, so none is silently dropped."""

    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None
    output_expires_after: dict[str, Any] | None = None


class BatchError(msgspec.Struct, kw_only=True):
    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchErrors(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[BatchError] = []


class RequestCounts(msgspec.Struct, kw_only=True, frozen=True):
    total: int = 0
    completed: int = 0
    failed: int = 0


BatchStatus = Literal[
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
]


class Batch(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: RequestCounts = RequestCounts()
    metadata: dict[str, str] | None = None


class BatchList(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[Batch]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool = False


class InputLine(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One line of a batch's input file."""

    custom_id: str
    method: str
    url: str
    body: dict[str, Any]


class LineResponse(msgspec.Struct, kw_only=True):
    status_code: int
    request_id: str
    body: Any


class LineError(msgspec.Struct, kw_only=True):
    code: str
    message: str


class OutputLine(msgspec.Struct, kw_only=True):
    """One line of a batch's output file (a success) or error file (a failure)."""

    id: str
    custom_id: str
    response: LineResponse | None = None
    error: LineError | None = None
