"""Background responses (`POST /v1/responses` with `background: true`).

The create call answers at once with the response `queued`, stored as every response is;
the work is then one more request to the app's own door (gateway/http/own_door.py), made
for the same key at the same priority as the create call: the same route, key guard,
limits, policy and events (with `response_id` bound) as an interactive `stream: true`
request. Its stream's events are kept here, numbered from the `response.queued` this
module adds, so that a client may follow them (`stream: true` on the create call) and come
back to them (`GET /v1/responses/{id}?stream=true&starting_after=N`); once the response
ends they are kept with the stored response.

Nothing of the work outlives the process: a stop marks what still runs `failed`, and a
start marks `failed` whatever a previous run left queued or in progress (a crash).
"""

from __future__ import annotations

import asyncio
import json
from asyncio import to_thread
from collections.abc import AsyncIterator
from typing import Any

from litestar.response import ServerSentEventMessage
from litestar.types import Message

from engines.errors import BadRequest, StoredNotFound
from engines.log import bind_only, emit
from engines.tasks import Tasks
from gateway.http.auth import STORED_OWNER
from gateway.http.own_door import EVENT_FIELDS, ON_BEHALF, own_receive, own_scope
from gateway.openai.response_store import ResponseStore
from schemas.canonical import Client
from schemas.events import BackgroundResponseChanged

# The scope's state key that tells the `/v1/responses` route it works a background
# response: the id and creation time its create call gave it (never set by a client).
BACKGROUND = "background_response"
LIVE = ("queued", "in_progress")
MIN_RETRY_S, MAX_RETRY_S = 0.1, 5.0  # a 429's wait before the work asks again
ENDS = ("response.completed", "response.incomplete", "response.failed")
STOPPED = "the gateway stopped before this background response finished"
RESTARTED = (
    "the gateway restarted: this background response was running in the process that stopped"
)


class Run:
    """One background response while this process works it: its events so far (an
    event's `sequence_number` is its index) and who waits for the next."""

    def __init__(self, owner: str, response: dict[str, Any]) -> None:
        self.owner = owner
        self.response = response
        self.events: list[tuple[str, str]] = []  # (type, JSON)
        self.done = False
        self.cancelling = False
        self.task: asyncio.Task | None = None
        self._changed = asyncio.Event()

    def add(self, event: dict[str, Any]) -> None:
        event["sequence_number"] = len(self.events)
        self.events.append((event["type"], json.dumps(event)))
        self.wake()

    def wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def next_change(self) -> asyncio.Event:
        """Set at the next event (or the end): taken before reading, no wake is missed."""
        return self._changed


class BackgroundResponses:
    """The background responses this process works, by id."""

    def __init__(self, store: ResponseStore) -> None:
        self.store = store
        self._app: Any = None
        self._runs: dict[str, Run] = {}
        self._tasks = Tasks()

    def bind(self, app: Any) -> None:
        """The app whose door the work goes through (made after this)."""
        self._app = app

    async def start(self) -> None:
        """What a previous run left queued or in progress cannot go on (its work was in
        that process): marked failed, saying so."""
        if self.store.problem:
            return
        for owner, response in await to_thread(self.store.unfinished):
            await self._end(owner, response, "failed", ("server_error", RESTARTED))

    async def stop(self) -> None:
        """The lifespan ends: what still runs is withdrawn and marked failed."""
        for run in list(self._runs.values()):
            if run.task is not None:
                run.task.cancel()
        await self._tasks.wait()

    def launch(self, owner: str, client: Client, body: dict[str, Any], queued: dict) -> Run:
        """Work `queued` (just stored) in the background: `body` is its create call's."""
        run = Run(owner, queued)
        run.add({"type": "response.queued", "response": queued})
        self._runs[queued["id"]] = run
        run.task = self._tasks.spawn(self._work(run, client, body), f"response {queued['id']}")
        emit(BackgroundResponseChanged(response_id=queued["id"], status="queued"))
        return run

    async def _work(self, run: Run, client: Client, body: dict[str, Any]) -> None:
        response_id = run.response["id"]
        # Started from the create call, this task must not speak as that request.
        bind_only(response_id=response_id)
        if self._app is not None:
            self._app.state.log_scope.enter()
        inner = {k: v for k, v in body.items() if k != "background"} | {"stream": True}
        raw = json.dumps(inner).encode()
        state = {
            ON_BEHALF: client,
            EVENT_FIELDS: {"response_id": response_id},
            STORED_OWNER: run.owner,
            BACKGROUND: {"id": response_id, "created_at": run.response["created_at"]},
        }
        try:
            while (wait := await self._ask(run, state, raw)) is not None:
                await asyncio.sleep(wait)  # refused by the key's limits: it stays queued
            if not run.done:
                await self._fail(run, "server_error", "the response's stream ended unfinished")
        except asyncio.CancelledError:
            if run.cancelling:
                await self._finish(run, "cancelled")
            else:
                await self._fail(run, "server_error", STOPPED)
        finally:
            if not run.done:  # a failure of this task's own: still an end
                await self._fail(run, "server_error", "the background response's work failed")

    async def _ask(self, run: Run, state: dict[str, Any], raw: bytes) -> float | None:
        """One request for the work; seconds to wait before asking again when the key's
        limits (or the model's full queue) answered 429, else None: it has ended."""
        status, headers, refusal, pending = 500, {}, bytearray(), bytearray()

        async def send(message: Message) -> None:
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
            elif message["type"] == "http.response.body" and status != 200:
                refusal.extend(message.get("body", b""))
            elif message["type"] == "http.response.body":
                pending.extend(message.get("body", b""))
                for event in _frames(pending):
                    await self._on_event(run, event)

        await self._app(own_scope("/v1/responses", raw, state), own_receive(raw), send)
        if status == 429:
            try:
                return min(max(float(headers.get("retry-after", "1")), MIN_RETRY_S), MAX_RETRY_S)
            except ValueError:
                return 1.0
        if status != 200:
            await self._fail(run, *_refused(status, bytes(refusal)))
        return None

    async def _on_event(self, run: Run, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "error":
            # The stream failed after it began: the response failed, as OpenAI says it.
            await self._fail(run, event.get("code") or "server_error", event.get("message", ""))
            return
        if "response" in event:
            run.response = event["response"]
        if kind == "response.created":
            await to_thread(self.store.update, run.owner, run.response)
            emit(BackgroundResponseChanged(response_id=run.response["id"], status="in_progress"))
        run.add(event)
        if kind in ENDS:
            # Stored by the route before it sent this event.
            await self._close(run, run.response["status"])

    async def _fail(self, run: Run, code: str, message: str) -> None:
        if run.done:
            return
        await self._finish(run, "failed", (code, message))

    async def _finish(self, run: Run, status: str, error: tuple[str, str] | None = None) -> None:
        run.response = await self._end(run.owner, run.response, status, error)
        if status == "failed":
            run.add({"type": "response.failed", "response": run.response})
        await self._close(run, run.response["status"])

    async def _end(
        self, owner: str, response: dict, status: str, error: tuple[str, str] | None
    ) -> dict:
        """Store `response` ended with `status` unless it ended meanwhile; as it now is."""
        ended = dict(response, status=status)
        if error is not None:
            ended["error"] = {"code": error[0], "message": error[1]}
        if await to_thread(self.store.update, owner, ended):
            emit(BackgroundResponseChanged(response_id=ended["id"], status=status))
            return ended
        return await to_thread(self.store.response, owner, response["id"]) or ended

    async def _close(self, run: Run, status: str) -> None:
        if run.done:
            return
        run.done = True
        response_id = run.response["id"]
        if status in ("completed", "incomplete"):  # `_end` told the others
            emit(BackgroundResponseChanged(response_id=response_id, status=status))
        await to_thread(self.store.keep_events, response_id, [e for _, e in run.events])
        self._runs.pop(response_id, None)
        run.wake()

    async def cancel(self, owner: str, response_id: str) -> dict[str, Any]:
        """Cancel a background response still queued or in progress; one that ended is
        answered as it ended (cancelling is idempotent, as OpenAI documents)."""
        stored = await self._background(owner, response_id, "cancelled")
        run = self._runs.get(response_id)
        if run is not None and run.owner == owner and not run.done and run.task is not None:
            run.cancelling = True
            run.task.cancel()
            await asyncio.gather(run.task, return_exceptions=True)
        return await to_thread(self.store.response, owner, response_id) or stored

    async def withdraw(self, owner: str, response_id: str) -> None:
        """Before a delete: a response still running is cancelled first (its work would
        otherwise store it again as it ends)."""
        run = self._runs.get(response_id)
        if run is not None and run.owner == owner:
            await self.cancel(owner, response_id)

    async def _background(self, owner: str, response_id: str, verb: str) -> dict[str, Any]:
        stored = await to_thread(self.store.response, owner, response_id)
        if stored is None:
            raise StoredNotFound(f"Response with id {response_id!r} not found.")
        if not stored.get("background"):
            raise BadRequest(
                f"Only responses created with background: true can be {verb} ({response_id!r})"
            )
        return stored

    async def events(
        self, owner: str, response_id: str, after: int | None
    ) -> AsyncIterator[ServerSentEventMessage]:
        """A background response's stream from after event `after` (from its first without
        it): checked now (404, 400), followed as it runs, or read back once it ended."""
        await self._background(owner, response_id, "streamed")
        first = -1 if after is None else after
        run = self._runs.get(response_id)
        if run is None or run.owner != owner:
            kept = await to_thread(self.store.events, owner, response_id)
            return _replay([(json.loads(e)["type"], e) for e in kept], first + 1)
        return _follow(run, first + 1)


async def _replay(events: list[tuple[str, str]], start: int) -> AsyncIterator[Any]:
    for kind, data in events[start:]:
        yield ServerSentEventMessage(event=kind, data=data)


async def _follow(run: Run, start: int) -> AsyncIterator[Any]:
    at = start
    while True:
        change = run.next_change()
        while at < len(run.events):
            kind, data = run.events[at]
            yield ServerSentEventMessage(event=kind, data=data)
            at += 1
        if run.done:
            return
        await change.wait()


def _frames(pending: bytearray) -> list[dict[str, Any]]:
    """The complete SSE frames at the head of `pending` (taken off it), each its JSON data."""
    events = []
    while True:
        text = pending.replace(b"\r\n", b"\n")
        end = text.find(b"\n\n")
        if end < 0:
            return events
        frame, rest = bytes(text[:end]), text[end + 2 :]
        pending[:] = rest
        data = b"".join(
            line[5:].strip() for line in frame.split(b"\n") if line.startswith(b"data:")
        )
        if data:
            events.append(json.loads(data))


def _refused(status: int, body: bytes) -> tuple[str, str]:
    """The code and message of an answer that refused the work (its error body)."""
    try:
        error = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    code = error.get("code") or ("rate_limit_exceeded" if status == 429 else "server_error")
    return str(code), error.get("message") or f"the work was refused with status {status}"
