"""The batches' runner: validates each batch's input file, runs its lines through the
gateway's own door (`dispatch`), few at a time per model, and writes its output and error
files once every line has a result.

A batch is worked by one task; its lines go in order, each taking a slot of its model's
(`server.batches.concurrency` per model, shared by every batch), so an interactive request
never finds more than that many batch lines ahead of it on a model, and each line is queued
at `server.batches.priority`, below every interactive request. A line's result is stored
the moment it has one: a restart resumes each live batch with the lines still without one.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec.structs import replace

from engines.log import bind_only, emit
from engines.tasks import Tasks
from gateway.batches.dispatch import dispatch
from gateway.batches.store import BatchStore, Line, now
from schemas.batches import (
    Batch,
    BatchError,
    BatchErrors,
    FileObject,
    InputLine,
    LineError,
    LineResponse,
    OutputLine,
    RequestCounts,
)
from schemas.canonical import Client
from schemas.config import GatewayConfig
from schemas.events import BatchChanged

EXPIRED = "This request could not be executed before the completion window expired."
MAX_ERRORS = 100  # a file that fails validation names at most this many of its faults
MIN_RETRY_S = 0.1  # a 429's shortest wait before the line asks again


def file_id() -> str:
    return f"file-{uuid.uuid4().hex[:24]}"


class BatchRunner:
    """Works the live batches of one gateway (one task a batch)."""

    def __init__(self, store: BatchStore, config: Callable[[], GatewayConfig]) -> None:
        self.store = store
        self._config = config
        self._app: Any = None
        self._tasks = Tasks()
        self._working: dict[str, asyncio.Task] = {}
        self._lines: dict[str, set[asyncio.Task]] = {}  # each batch's lines in flight
        self._pauses: dict[str, asyncio.Lock] = {}
        self._slots: dict[tuple[str, int], asyncio.Semaphore] = {}
        self._writes: set[asyncio.Future] = set()  # lines' results being stored
        self._moving = asyncio.Lock()
        self._halted = False

    def bind(self, app: Any) -> None:
        """The app whose door the lines go through (made after this runner)."""
        self._app = app

    async def start(self) -> None:
        """Resume every batch a previous run left live."""
        if self.store.problem:  # said at start; the routes answer 503
            return
        for batch_id in await asyncio.to_thread(self.store.live):
            self.kick(batch_id)

    def halt(self) -> None:
        """The gateway drains: no new line starts. The lines in flight are requests in
        flight like any other: the drain waits for them (`server.shutdown_grace`) and their
        results are stored, so the next start runs only the lines that never ran."""
        self._halted = True

    async def stop(self) -> None:
        """The lifespan ends: what still runs (past the drain's grace) is withdrawn, its
        lines left without a result to run at the next start; results being written are
        written before the store closes."""
        self._halted = True
        for task in list(self._working.values()):
            task.cancel()
        await self._tasks.wait()
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    def kick(self, batch_id: str) -> None:
        if batch_id not in self._working and not self._halted:
            self._working[batch_id] = self._tasks.spawn(self._work(batch_id), f"batch {batch_id}")

    async def cancel(self, batch_id: str) -> Batch:
        """Cancel a batch still validating or in progress: `cancelling` while its lines in
        flight are withdrawn, then `cancelled` with the files of what had finished."""
        batch = await self.transition(batch_id, ("validating", "in_progress"), status="cancelling")
        if batch.status == "cancelling":
            for task in list(self._lines.get(batch_id, ())):
                task.cancel()
            self.kick(batch_id)
        return batch

    async def _work(self, batch_id: str) -> None:
        # Started from the request that made or cancelled the batch, this task must not
        # speak as that request: its events name the batch alone.
        bind_only(batch_id=batch_id)
        if self._app is not None:
            self._app.state.log_scope.enter()
        try:
            await self._advance(batch_id)
        finally:
            self._working.pop(batch_id, None)

    async def _advance(self, batch_id: str) -> None:
        store = self.store
        batch = await asyncio.to_thread(store.batch, None, batch_id)
        owner = await asyncio.to_thread(store.owner, batch_id)
        if batch is None or owner is None:
            return
        if batch.status == "validating":
            batch = await self._validate(batch, owner)
        if batch.status == "in_progress":
            await self._run_lines(batch, owner)
            if self._halted:  # the gateway stops: the next start goes on from here
                return
            if _past(batch):
                batch = await self.transition(batch_id, ("in_progress",), status="expired")
            else:
                batch = await self.transition(batch_id, ("in_progress",), status="finalizing")
        if batch.status in ("finalizing", "cancelling", "expired"):
            await self._finalize(batch, owner)

    async def transition(self, batch_id: str, expect: tuple[str, ...], **changes: Any) -> Batch:
        """Move the batch to `changes["status"]` (its `<status>_at` set now) if it is in one
        of `expect`; the batch as it then is. One move at a time: the runner's and a
        cancel's never overwrite each other."""
        async with self._moving:
            batch = await asyncio.to_thread(self.store.batch, None, batch_id)
            if batch.status not in expect:
                return batch
            total, completed, failed = await asyncio.to_thread(self.store.counts, batch_id)
            counts = RequestCounts(total=total, completed=completed, failed=failed)
            status = changes.get("status", batch.status)
            if status != batch.status and status != "in_progress":
                changes[f"{status}_at"] = now()
            batch = replace(batch, request_counts=counts, **changes)
            await asyncio.to_thread(self.store.update, batch)
        emit(BatchChanged(batch_id=batch_id, status=batch.status, **msgspec.structs.asdict(counts)))
        return batch

    async def _validate(self, batch: Batch, owner: str) -> Batch:
        content = await asyncio.to_thread(self.store.content, owner, batch.input_file_id)
        lines, errors = validate(content, batch.endpoint)
        if errors:
            return await self.transition(
                batch.id, ("validating",), status="failed", errors=BatchErrors(data=errors)
            )
        async with self._moving:  # its lines and its move to in_progress, as one
            current = await asyncio.to_thread(self.store.batch, None, batch.id)
            if current.status != "validating":
                return current  # cancelled meanwhile
            running = replace(
                current,
                status="in_progress",
                in_progress_at=now(),
                request_counts=RequestCounts(total=len(lines)),
            )
            await asyncio.to_thread(self.store.add_lines, running, lines)
        emit(BatchChanged(batch_id=batch.id, status="in_progress", total=len(lines)))
        return running

    async def _run_lines(self, batch: Batch, owner: str) -> None:
        pending = await asyncio.to_thread(self.store.pending, batch.id)
        flying = self._lines.setdefault(batch.id, set())
        try:
            for line in pending:
                current = await asyncio.to_thread(self.store.batch, None, batch.id)
                if self._halted or current.status != "in_progress" or _past(current):
                    break
                slot = self._slot(line)
                await self._acquire_unpaused(batch.id, slot)
                current = await asyncio.to_thread(self.store.batch, None, batch.id)
                if self._halted or current.status != "in_progress":  # while it waited
                    slot.release()
                    break
                task = asyncio.ensure_future(self._run_line(batch, owner, line, slot))
                flying.add(task)
                task.add_done_callback(flying.discard)
            # What is in flight finishes (or, cancelled, is left to run again).
            while flying:
                await asyncio.gather(*flying, return_exceptions=True)
        finally:
            for task in flying:
                task.cancel()
            self._lines.pop(batch.id, None)
            self._pauses.pop(batch.id, None)

    async def _acquire_unpaused(self, batch_id: str, slot: asyncio.Semaphore) -> None:
        """The model's slot, at a moment no line of the batch waits out a 429 (a line
        that pauses the batch takes the pause before it lets the slot go)."""
        pause = self._pause(batch_id)
        while True:
            async with pause:
                pass
            await slot.acquire()
            if not pause.locked():
                return
            slot.release()

    def _pause(self, batch_id: str) -> asyncio.Lock:
        """Held while one of the batch's lines waits to ask again after a 429."""
        return self._pauses.setdefault(batch_id, asyncio.Lock())

    def _slot(self, line: Line) -> asyncio.Semaphore:
        """The line's model's slots: keyed by the model its `model` names (an alias is its
        model's), so all batches share a model's `server.batches.concurrency`."""
        config = self._config()
        generation_names = {m.id: m.id for m in config.models}
        for model in config.models:
            generation_names.update(dict.fromkeys(model.aliases, model.id))
        try:
            named = msgspec.json.decode(line.body).get("model")
        except msgspec.DecodeError:
            named = None
        model = generation_names.get(named, config.server.fallback or str(named))
        key = (generation_names.get(model, model), config.server.batches.concurrency)
        if key not in self._slots:
            self._slots[key] = asyncio.Semaphore(key[1])
        return self._slots[key]

    async def _run_line(
        self, batch: Batch, owner: str, line: Line, slot: asyncio.Semaphore
    ) -> None:
        held = True
        try:
            priority = self._config().server.batches.priority
            client = Client(key=owner or None, priority=priority)
            fields = {"batch_id": batch.id, "custom_id": line.custom_id}
            stored = await asyncio.to_thread(self.store.stored_owner, batch.id)

            async def send() -> tuple[LineResponse, dict[str, str]]:
                return await dispatch(self._app, batch.endpoint, line.body, client, fields, stored)

            response, headers = await send()
            if response.status_code == 429:
                # Past the key's limits (or the model's queue full): work that waits waits,
                # without its model's slot, and asks again once the answer says it may; the
                # batch sends no other line meanwhile (`_run_lines` waits on its pause).
                async with self._pause(batch.id):
                    while response.status_code == 429:
                        slot.release()
                        held = False
                        await asyncio.sleep(_retry_after(headers, batch))
                        if not await self._still_running(batch.id):
                            return  # cancelled, expired or stopping: the line has no result
                        await slot.acquire()
                        held = True
                        response, headers = await send()
        finally:
            if held:
                slot.release()
        if response.status_code == 503 and self._draining():
            return  # refused by the drain: no fault of the line's, run at the next start
        ok = 200 <= response.status_code < 300
        result = OutputLine(
            id=f"batch_req_{uuid.uuid4().hex[:24]}", custom_id=line.custom_id, response=response
        )
        encoded = msgspec.json.encode(result)
        # Shielded, and waited for by `stop`: a line that has its answer is stored even as
        # the gateway stops.
        write = asyncio.ensure_future(
            asyncio.to_thread(self.store.finish_line, batch.id, line.idx, encoded, ok)
        )
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)
        await asyncio.shield(write)

    async def _still_running(self, batch_id: str) -> bool:
        current = await asyncio.to_thread(self.store.batch, None, batch_id)
        return not self._halted and current.status == "in_progress" and not _past(current)

    def _draining(self) -> bool:
        return self._halted or bool(self._app and self._app.state.admission.draining)

    async def _finalize(self, batch: Batch, owner: str) -> None:
        """The output file (successes) and the error file (failures; on expiry, the lines
        never run too), then the batch's final status, in one transaction."""
        store = self.store
        oks = await asyncio.to_thread(store.results, batch.id, True)
        fails = await asyncio.to_thread(store.results, batch.id, False)
        if batch.status == "expired":
            for line in await asyncio.to_thread(store.pending, batch.id):
                error = LineError(
                    code="batch_expired",
                    message=EXPIRED,
                )
                expired = OutputLine(
                    id=f"batch_req_{uuid.uuid4().hex[:24]}", custom_id=line.custom_id, error=error
                )
                fails.append(msgspec.json.encode(expired))
        files = []
        changes: dict[str, Any] = {}
        for name, lines in (("output", oks), ("error", fails)):
            if not lines:
                continue
            content = b"".join(line + b"\n" for line in lines)
            file = FileObject(
                id=file_id(),
                bytes=len(content),
                created_at=now(),
                filename=f"{batch.id}_{name}.jsonl",
                purpose="batch_output",
            )
            files.append((file, content))
            changes[f"{name}_file_id"] = file.id
        final = {
            "finalizing": {"status": "completed", "completed_at": now()},
            "cancelling": {"status": "cancelled", "cancelled_at": now()},
            "expired": {},
        }[batch.status]  # expired: its `expired_at` is set already
        total, completed, failed = await asyncio.to_thread(store.counts, batch.id)
        if batch.status == "expired":
            failed = total - completed
        counts = RequestCounts(total=total, completed=completed, failed=failed)
        async with self._moving:
            done = replace(batch, request_counts=counts, **changes, **final)
            await asyncio.to_thread(store.finalize, done, owner, files)
        emit(BatchChanged(batch_id=done.id, status=done.status, **msgspec.structs.asdict(counts)))


def _retry_after(headers: dict[str, str], batch: Batch) -> float:
    """Seconds until a line refused with a 429 asks again: the answer's `Retry-After`
    (1 s without one), never past the batch's window."""
    try:
        wait = max(float(headers.get("retry-after", "1")), MIN_RETRY_S)
    except ValueError:
        wait = 1.0
    if batch.expires_at is not None:
        wait = min(wait, max(batch.expires_at - time.time(), 0.0))
    return wait


def _past(batch: Batch) -> bool:
    return batch.expires_at is not None and time.time() >= batch.expires_at


def validate(
    content: bytes | None, endpoint: str
) -> tuple[list[tuple[str, bytes]], list[BatchError]]:
    """A batch input file's lines (`custom_id`, request body as JSON), or what is wrong with
    it, line by line (1-based) as OpenAI's `errors.data` names them."""
    if content is None:
        return [], [BatchError(code="invalid_file", message="the input file no longer exists")]
    lines: list[tuple[str, bytes]] = []
    errors: list[BatchError] = []
    seen: set[str] = set()

    def fault(code: str, message: str, number: int, param: str | None = None) -> None:
        if len(errors) < MAX_ERRORS:
            errors.append(BatchError(code=code, message=message, line=number, param=param))

    for number, raw in enumerate(content.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = msgspec.json.decode(raw, type=InputLine)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            fault("invalid_json_line", f"line {number} is not a batch request: {error}", number)
            continue
        if line.method.upper() != "POST":
            fault("invalid_request", f"method {line.method!r}: only POST is run", number, "method")
        elif line.url != endpoint:
            message = f"url {line.url!r} is not the batch's endpoint {endpoint!r}"
            fault("mismatched_endpoint", message, number, "url")
        elif line.custom_id in seen:
            message = f"custom_id {line.custom_id!r} is used by an earlier line"
            fault("duplicate_custom_id", message, number, "custom_id")
        elif not isinstance(line.body.get("model"), str):
            fault("missing_required_parameter", "the body names no model", number, "body.model")
        elif line.body.get("stream"):
            message = "stream: a batch line's answer is stored whole, not streamed"
            fault("invalid_request", message, number, "body.stream")
        else:
            seen.add(line.custom_id)
            lines.append((line.custom_id, msgspec.json.encode(line.body)))
    if not lines and not errors:
        errors.append(BatchError(code="empty_file", message="the input file holds no request"))
    return lines, errors
