"""Request and response bodies for the Activity history, only for models with `capture: true`.

An ASGI middleware (inside `request_events`, so the request id and its log scope are set)
keeps the first CAPTURE_LIMIT bytes of each protocol request's body as it is read; once the
request is routed (`request_routed`, heard as an event listener) to a model that captures,
it keeps the answer's bytes too, and the MCP calls the gateway made for it (each call's
server, tool, arguments and result: gateway/mcp/calls.py's transcript, held in memory for
every request and dropped unless it captures). When the request ends, all pass the log's
redactor and go to the Activity store. Requests to any other model are never kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from engines.log import bound
from gateway.logs.setup import current_redactor
from gateway.mcp.calls import TRANSCRIPT
from gateway.ops.activity.rows import protocol_of
from gateway.ops.activity.store import ActivityStore
from schemas.config import GatewayConfig
from schemas.events import Event, RequestRouted

CAPTURE_LIMIT = 64 * 1024  # bytes kept of each body


class _Bodies:
    def __init__(self) -> None:
        self.on = False  # routed to a model that captures
        self.request = bytearray()
        self.response = bytearray()
        self.request_bytes = 0
        self.response_bytes = 0
        self.tool_calls: list[dict] = []  # the MCP calls the gateway made (gateway/mcp/calls.py)

    def text(self, kept: bytearray, total: int) -> str:
        text = kept.decode("utf-8", errors="replace")
        return text if total <= len(kept) else f"{text}… ({total} bytes in all)"


def _keep(into: bytearray, chunk: bytes) -> None:
    into += chunk[: max(0, CAPTURE_LIMIT - len(into))]


class Capture:
    """The middleware and the listener, sharing the bodies of the requests in flight."""

    def __init__(self, store: ActivityStore, config: Callable[[], GatewayConfig]) -> None:
        self._store = store
        self._config = config
        self._live: dict[str, _Bodies] = {}

    def observe(self, event: Event) -> None:
        """The event listener: a request routed to a capturing model starts keeping."""
        if not isinstance(event, RequestRouted):
            return
        bodies = self._live.get(bound().get("request_id", ""))
        if bodies is not None:
            bodies.on = any(m.capture for m in self._config().models if m.id == event.served)

    def wrap(self, app: ASGIApp) -> ASGIApp:
        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            request_id = bound().get("request_id")
            if scope["type"] != "http" or not request_id or not protocol_of(scope["path"]):
                await app(scope, receive, send)
                return
            bodies = self._live[request_id] = _Bodies()
            TRANSCRIPT.set(bodies.tool_calls)  # this request's task and what it awaits

            async def receive_keeping() -> Message:
                message = await receive()
                if message["type"] == "http.request":
                    chunk = message.get("body", b"")
                    bodies.request_bytes += len(chunk)
                    _keep(bodies.request, chunk)
                return message

            async def send_keeping(message: Message) -> None:
                if bodies.on and message["type"] == "http.response.body":
                    chunk = message.get("body", b"")
                    bodies.response_bytes += len(chunk)
                    _keep(bodies.response, chunk)
                await send(message)

            try:
                await app(scope, receive_keeping, send_keeping)
            finally:
                del self._live[request_id]
                if bodies.on:
                    redact = current_redactor().redact
                    calls = bodies.tool_calls
                    self._store.capture(
                        request_id,
                        redact(bodies.text(bodies.request, bodies.request_bytes)),
                        redact(bodies.text(bodies.response, bodies.response_bytes)),
                        redact(json.dumps(calls, indent=1)[:CAPTURE_LIMIT]) if calls else None,
                    )

        return middleware
