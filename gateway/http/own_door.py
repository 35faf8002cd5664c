"""A request the gateway makes of itself (a batch line, a background response): the ASGI
scope and `receive` handed to the app's own entry, so that it meets what any request meets
(the route, the key guard, limits, events). Who it is made for rides in the scope's state
(`ON_BEHALF`, read by gateway/http/auth.py), which no HTTP client can write."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar.types import Message, Receive

ON_BEHALF = "on_behalf"  # the scope's state key the key guard reads (gateway/http/auth.py)
EVENT_FIELDS = "event_fields"  # fields bound into every event (gateway/http/middleware.py)


def own_scope(path: str, body: bytes, state: dict[str, Any]) -> dict[str, Any]:
    """A JSON `POST path` from the loopback address, with `state` as its scope's state."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
        "state": state,
    }


def own_receive(body: bytes) -> Receive:
    """The body, then nothing: this "client" never leaves (cancelling the task that awaits
    the app is its leaving)."""
    sent = False
    never = asyncio.Event()

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await never.wait()
        return {"type": "http.disconnect"}

    return receive
