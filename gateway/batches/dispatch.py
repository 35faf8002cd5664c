"""One batch line as one request to the gateway itself: the same door as an interactive one.

The line is handed to the app's own ASGI entry, so it meets what any request meets: the
route its `url` names, the model's aliases and fallback, the key's models, limits and
budget (the key guard admits it under the batch's key), the request's events (with the
batch's id bound), the ops page's requests in flight. Only who sent it differs: the guard
takes the key and priority from the scope built here (gateway/http/own_door.py), which no HTTP
client can write, instead of from headers.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar.types import Message

from gateway.http.auth import STORED_OWNER
from gateway.http.own_door import EVENT_FIELDS, ON_BEHALF, own_receive, own_scope
from schemas.batches import LineResponse
from schemas.canonical import Client


async def dispatch(
    app: Any, path: str, body: bytes, client: Client, fields: dict[str, str], stored: str = ""
) -> tuple[LineResponse, dict[str, str]]:
    """POST `body` to `path` on `app` as `client` (`stored`: whose stored Responses it
    reads and writes); what came back (status, request id, body) and the answer's headers
    (lower-cased names)."""
    state = {ON_BEHALF: client, EVENT_FIELDS: fields, STORED_OWNER: stored}
    scope, receive = own_scope(path, body, state), own_receive(body)
    status, headers, chunks = 500, {}, []

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    raw = b"".join(chunks)
    try:
        decoded = msgspec.json.decode(raw) if raw else None
    except msgspec.DecodeError:
        decoded = raw.decode(errors="replace")
    line = LineResponse(
        status_code=status, request_id=headers.get("x-request-id", ""), body=decoded
    )
    return line, headers
