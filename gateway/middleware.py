"""Per-request events: a request id bound for every line, `request_started`/`_finished`."""

from __future__ import annotations

import time
import uuid

import structlog
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from engines.log import emit
from schemas.events import RequestFinished, RequestStarted


def request_events(app: ASGIApp) -> ASGIApp:
    """ASGI middleware: binds `request_id` and logs one summary line when the response ends."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        request_id = f"req_{uuid.uuid4().hex[:16]}"
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        emit(RequestStarted(method=scope["method"], path=scope["path"]))
        started = time.perf_counter()
        status = 499  # stays so when the client leaves before any response starts

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode()),
                ]
            await send(message)

        try:
            await app(scope, receive, send_with_id)
        finally:
            error = scope.get("state", {}).get("error")
            emit(
                RequestFinished(
                    status=status,
                    duration_ms=round((time.perf_counter() - started) * 1000, 2),
                    error=error,
                )
            )
            structlog.contextvars.clear_contextvars()

    return middleware
