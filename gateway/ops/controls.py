"""The page's model and request controls (admin key): pin/unpin a model, cancel a request.

Pinning from the page keeps a model loaded with no idle unload, as Ollama's `keep_alive: -1`
does (a later Ollama request's own `keep_alive` replaces it); unpinning returns it to its
`idle_ttl`. A model pinned in models.yaml stays pinned: edit the file for that.

Cancelling ends a request the way a client that leaves does: its task is cancelled, so a
queued job leaves the line and a running one stops within a token. The client gets a 503
saying so, or, once its stream has started, the end of the stream.
"""

from __future__ import annotations

import asyncio

from litestar import post
from litestar.datastructures import State
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from engines.errors import ModelNotFound
from engines.log import bound
from engines.runner.keep import Pin, Unpin
from gateway.control.registry import Generation
from gateway.http.middleware import send_error
from gateway.ops.admin import ADMIN, ADMIN_GUARDS, runner_of

CANCELLED = "cancelled by the operator (the ops page)"


class InFlight:
    """Requests being answered now, by request id: what the cancel control can reach."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task] = {}
        self._cancelled: set[str] = set()

    def cancel(self, request_id: str) -> bool:
        task = self._tasks.get(request_id)
        if task is None or task.done():
            return False
        self._cancelled.add(request_id)
        task.cancel()
        return True

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """ASGI middleware inside `request_events` (whose request id it reads)."""

        async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
            request_id = bound().get("request_id")
            task = asyncio.current_task()
            if scope["type"] != "http" or request_id is None or task is None:
                await app(scope, receive, send)
                return
            started = completed = False

            async def watch(message: Message) -> None:
                nonlocal started, completed
                started = started or message["type"] == "http.response.start"
                body = message["type"] == "http.response.body"
                completed = completed or (body and not message.get("more_body"))
                await send(message)

            self._tasks[request_id] = task
            try:
                await app(scope, receive, watch)
            except asyncio.CancelledError:
                if request_id not in self._cancelled:
                    raise
                task.uncancel()
                if not completed:  # else the answer was out already: nothing to end
                    await _answer_cancelled(scope, send, started)
            finally:
                self._tasks.pop(request_id, None)
                self._cancelled.discard(request_id)

        return middleware


async def _answer_cancelled(scope: Scope, send: Send, started: bool) -> None:
    scope.setdefault("state", {})["error"] = CANCELLED
    if started:  # the headers are gone: end the body, the request's line says why
        scope["state"]["failed_status"] = 503
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    else:
        await send_error(scope, send, 503, CANCELLED)


@post("/ui/api/requests/{request_id:str}/cancel", status_code=200, guards=ADMIN_GUARDS, opt=ADMIN)
async def cancel_request(request_id: str, state: State) -> dict:
    """Cancel a queued or running request by its id (`x-request-id`); 404 when none runs."""
    if not state.inflight.cancel(request_id):
        raise ModelNotFound(f"no request {request_id!r} is being answered now")
    return {"request_id": request_id, "cancelled": True}


@post("/ui/api/models/{model_id:str}/pin", status_code=200, guards=ADMIN_GUARDS, opt=ADMIN)
async def pin(model_id: str, generation: Generation) -> dict:
    """Keep the model loaded (loading it now), with no idle unload."""
    runner = runner_of(generation, model_id)
    await runner.reside(Pin())
    return {"model": model_id, "pinned_now": True, "state": runner.state.value}


@post("/ui/api/models/{model_id:str}/unpin", status_code=200, guards=ADMIN_GUARDS, opt=ADMIN)
async def unpin(model_id: str, generation: Generation) -> dict:
    """Back to the model's `idle_ttl`; a model pinned in models.yaml is refused (400)."""
    runner = runner_of(generation, model_id)
    await runner.reside(Unpin())
    return {"model": model_id, "pinned_now": False, "state": runner.state.value}


ROUTES = [cancel_request, pin, unpin]
