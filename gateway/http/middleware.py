"""Per-request events: a request id bound for every line, `request_started`/`_finished`."""

from __future__ import annotations

import time
import uuid

import msgspec
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from engines import timeline
from engines.log import bind_only, emit
from gateway.http.errors import should_retry
from gateway.http.protocols import header_names
from gateway.http.request_state import end, headers_left
from gateway.logs.setup import MIN_ENV_SECRET, PRESENTED
from schemas.events import RequestFinished, RequestStarted


async def send_error(
    scope: Scope,
    send: Send,
    status: int,
    message: str,
    headers: list[tuple[bytes, bytes]] = (),
    kind: str | None = None,
) -> None:
    """Answer from a middleware, before any handler: the error in the path's protocol envelope.

    The message is recorded for the request's `request_finished` line as handlers' errors are.
    """
    scope.setdefault("state", {})["error"] = message
    protocol = scope["app"].state.protocols.of(scope["path"], header_names(scope["headers"]))
    body = msgspec.json.encode(protocol.envelope(status, message, kind))
    if should_retry(status):
        headers = [*headers, (b"x-should-retry", b"false")]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def presented_secrets(scope: Scope) -> tuple[str, ...]:
    """The key values this request sent (right or wrong), for the redactor to hide."""
    headers = dict(scope["headers"])
    authorization = headers.get(b"authorization", b"").decode("latin-1")
    values = (
        authorization,
        authorization.partition(" ")[2].strip(),
        headers.get(b"x-api-key", b"").decode("latin-1"),
    )
    return tuple(v for v in values if len(v) >= MIN_ENV_SECRET)


def key_allowance(scope: Scope, status: int) -> list[tuple[bytes, bytes]]:
    """What is left of the request's key's limits, as the guard left word to say (a 429
    carries its own)."""
    allowance = scope.get("state", {}).get("key_allowance")
    if allowance is None or status == 429:
        return []
    return [(name.encode(), value.encode()) for name, value in allowance().items()]


def request_events(app: ASGIApp) -> ASGIApp:
    """ASGI middleware: binds `request_id` and logs one summary line when the response ends."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        if timeline.ON:  # the server has parsed the request line and headers
            timeline.mark("request")
        request_id = f"req_{uuid.uuid4().hex[:16]}"
        scope["app"].state.log_scope.enter()  # this request logs to its own app's listeners
        # A request the gateway makes of itself (a batch line) names what it is part of.
        bind_only(request_id=request_id, **scope.get("state", {}).get("event_fields", {}))
        PRESENTED.set(presented_secrets(scope))
        emit(RequestStarted(method=scope["method"], path=scope["path"]))
        started = time.perf_counter()
        status = 499  # stays so when the client leaves before any response starts
        completed = gone = False

        async def receive_watching() -> Message:
            nonlocal gone
            message = await receive()
            gone = gone or message["type"] == "http.disconnect"
            return message

        async def send_with_id(message: Message) -> None:
            nonlocal status, completed
            if message["type"] == "http.response.body" and not message.get("more_body"):
                completed = True
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode()),
                    *key_allowance(scope, status),
                    *headers_left(scope),
                ]
            await send(message)

        try:
            await app(scope, receive_watching, send_with_id)
        finally:
            end(scope)  # what the request held ends with it (its key's slot)
            state = scope.get("state", {})
            if gone and not completed:
                status = 499  # the client left before its answer was complete
            error = state.get("error")
            emit(
                RequestFinished(
                    # A stream that failed after its 200 is logged with its error's status.
                    status=state.get("failed_status", status),
                    duration_ms=round((time.perf_counter() - started) * 1000, 2),
                    error=error,
                )
            )
            bind_only()

    return middleware
