"""Requests to a model's replicas: one attempt per replica, failover before the first output.

A request fails over to another replica when its replica fails before the first output
has been passed on (it could not be reached, timed out, answered an error status, or its
stream broke before saying anything); once an output is out, a failure ends the request
with `UpstreamError` / `UpstreamTimeout`, which each protocol turns into its in-stream
error. Every failure is an `upstream_failed` event naming the replica (never the key).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import httpx
import msgspec

from engines.errors import (
    BadRequest,
    GatewayError,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from engines.log import emit
from engines.upstream.replicas import NoReplica, Replica, ReplicaPool
from engines.upstream.wire import StreamDecoder, quoted, request_body
from schemas.canonical import ChatRequest, Output
from schemas.events import UpstreamFailed

# Statuses that say the request itself is wrong: the client's 400, on any replica alike.
CLIENT_ERRORS = {400, 413, 422}
PROBE_TIMEOUT_S = 5.0
# Lines read past `max_tokens`, for the replica's usage chunk: one that streams on is cut.
LINES_PAST_CAP = 8
T = TypeVar("T")
# httpx logs every request at INFO: the event log is ours alone (one JSON object a line).
logging.getLogger("httpx").setLevel(logging.WARNING)


class Failure(Exception):
    """One attempt's failure on one replica, before it is judged."""

    def __init__(
        self, message: str, *, status: int | None = None, kind: str = "status", retry=None
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.kind, self.retry_after = message, status, kind, retry

    @property
    def hard(self) -> bool:
        """Takes the replica out of rotation at once: unreachable, silent, or draining."""
        return self.kind in ("connect", "timeout") or self.status == 503

    def public(self, model_id: str) -> GatewayError:
        """What the client is told (the replica stays in the event, not in the answer)."""
        what = f"model {model_id!r}: {self.message}"
        if self.status in CLIENT_ERRORS:
            return BadRequest(what)
        if self.kind == "timeout":
            return UpstreamTimeout(what)
        if self.kind == "connect" or self.status in (429, 503):
            return UpstreamUnavailable(what, retry_after=self.retry_after)
        return UpstreamError(what)


class Upstream:
    """The pool, the HTTP client and the settings of one model's replicas (engine loop only)."""

    def __init__(
        self,
        model_id: str,
        pool: ReplicaPool,
        *,
        model: str | None,
        api_key: str | None,
        timeout: float,
        health: str | None,
    ) -> None:
        self.model_id = model_id
        self.pool = pool
        self._model = model
        self._health = health  # a fixed health path (engine process), else /health or /models
        self._timeout = timeout
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        slots = len(pool.replicas) * (pool.max_in_flight + 2)
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(max_connections=slots, max_keepalive_connections=slots),
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def stream(self, request: ChatRequest) -> AsyncIterator[Output]:
        """The request's outputs from the first replica that answers; ends with `Finished`."""
        path, body = request_body(request, self._model)
        content = msgspec.json.encode(body)
        tried: set[Replica] = set()
        last: Failure | None = None
        while True:
            try:
                replica = await self.pool.acquire(tried)
            except NoReplica:
                raise self._none_left(last) from None
            started = False
            try:
                async for output in self._attempt(replica, path, content, request):
                    started = True
                    yield output
                self.pool.succeeded(replica)
                return
            except Failure as failure:
                await self._failed(replica, failure, started)
                if started or failure.status in CLIENT_ERRORS:
                    raise failure.public(self.model_id) from None
                tried.add(replica)
                last = failure
            finally:
                await self.pool.release(replica)

    async def _attempt(
        self, replica: Replica, path: str, content: bytes, request: ChatRequest
    ) -> AsyncIterator[Output]:
        """One replica's answer. `timeout` is a deadline to its first output and then between
        outputs: keep-alive comments, empty chunks and trickled bytes do not move it (httpx's
        own read timeout restarts at every byte)."""
        decoder = StreamDecoder(
            show_reasoning=request.reasoning != "off", max_tokens=request.max_tokens
        )
        loop = asyncio.get_running_loop()
        sent = time.perf_counter()
        first: float | None = None
        deadline = loop.time() + self._timeout
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        try:
            async with contextlib.AsyncExitStack() as stack:
                opening = self._client.stream(
                    "POST", replica.base + path, content=content, headers=headers
                )
                response = await _by(deadline, stack.enter_async_context(opening))
                if response.status_code != 200:
                    raise await _by(deadline, _status_failure(response))
                lines = response.aiter_lines()
                done, past_cap = False, 0
                while not done:
                    try:
                        line = await _by(deadline, anext(lines))
                    except StopAsyncIteration:
                        break
                    if decoder.capped:
                        past_cap += 1
                        if past_cap > LINES_PAST_CAP:
                            break
                    if not line.startswith("data:"):
                        continue  # blank separators, `:` keep-alive comments, `event:` lines
                    data = line[5:].strip()
                    if data == "[DONE]":
                        done = True
                        break
                    progress = decoder.progress
                    try:
                        outputs = decoder.feed(msgspec.json.decode(data))
                    except msgspec.DecodeError:
                        raise Failure(f"the upstream sent bad JSON: {quoted(data[:200])}") from None
                    except UpstreamError as error:
                        raise Failure(error.message) from None
                    if decoder.progress != progress:
                        deadline = loop.time() + self._timeout
                    for output in outputs:
                        first = first or time.perf_counter()
                        yield output
                if not done and decoder.stop_reason is None:
                    raise Failure("the upstream's stream ended before the answer did")
        except (httpx.TimeoutException, TimeoutError):
            raise Failure("the upstream did not answer in time", kind="timeout") from None
        except httpx.TransportError as error:
            what = "could not be reached" if first is None else "broke off"
            raise Failure(f"the upstream {what}: {type(error).__name__}", kind="connect") from None
        now = time.perf_counter()
        first = first or now
        yield decoder.finished(first - sent, now - first, replica.name)

    async def _failed(self, replica: Replica, failure: Failure, started: bool) -> None:
        if failure.status not in CLIENT_ERRORS:
            await self.pool.failed(replica, failure.message, hard=failure.hard)
        others = any(r.up and r is not replica for r in self.pool.replicas)
        emit(
            UpstreamFailed(
                model=self.model_id,
                replica=replica.name,
                error=failure.message,
                status=failure.status,
                phase="mid_stream" if started else "before_first_byte",
                failover=not started and failure.status not in CLIENT_ERRORS and others,
            ),
            level="warning",
        )

    def _none_left(self, last: Failure | None) -> GatewayError:
        if last is not None:
            error = last.public(self.model_id)
            if isinstance(error, UpstreamUnavailable) and error.retry_after is None:
                error.retry_after = self.pool.retry_after()  # when a replica is next probed
            return error
        return UpstreamUnavailable(
            f"model {self.model_id!r}: no upstream replica is healthy right now "
            f"({self.pool.down()}); retry",
            retry_after=self.pool.retry_after(),
        )

    async def probe(self, replica: Replica) -> str | None:
        """One health check: None when healthy, else why not.

        A fixed `health` path must answer 200. Otherwise `/health` at the replica's origin
        (vLLM, SGLang, llama.cpp, mlx-lm's server, the gateway itself), and where a server has
        none (404/405), its `/models` list (Ollama's /v1, OpenAI itself) from then on.
        """
        if self._health:
            url = replica.origin + self._health
        else:
            url = replica.health_path or replica.origin + "/health"
        try:
            response = await self._client.get(url, timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError as error:
            return f"health check: {type(error).__name__}"
        learning = not self._health and replica.health_path is None
        if learning and response.status_code in (404, 405, 501):
            replica.health_path = replica.base + "/models"
            return await self.probe(replica)
        if response.status_code != 200:
            return f"health check answered {response.status_code}"
        return None

    async def complete(self, request: ChatRequest) -> dict[str, Any]:
        """One non-streaming answer (for counting a prompt), from the first replica in rotation."""
        path, body = request_body(request, self._model, stream=False)
        try:
            replica = await self.pool.acquire(set())
        except NoReplica:
            raise self._none_left(None) from None
        try:
            deadline = asyncio.get_running_loop().time() + self._timeout
            response = await _by(deadline, self._client.post(replica.base + path, json=body))
            if response.status_code != 200:
                raise (await _status_failure(response)).public(self.model_id)
            return response.json()
        except (httpx.TimeoutException, TimeoutError):
            raise UpstreamTimeout(f"model {self.model_id!r}: the upstream timed out") from None
        except httpx.HTTPError as error:
            raise UpstreamUnavailable(
                f"model {self.model_id!r}: the upstream failed: {type(error).__name__}"
            ) from None
        finally:
            await self.pool.release(replica)


async def _by(deadline: float, work: Awaitable[T]) -> T:
    """`work`'s result, or TimeoutError once the loop's clock passes `deadline`."""
    return await asyncio.wait_for(work, max(0.0, deadline - asyncio.get_running_loop().time()))


async def _status_failure(response: httpx.Response) -> Failure:
    """A Failure for an error status, with the replica's own message where it gave one."""
    raw = (await response.aread())[:2000]
    try:
        error = msgspec.json.decode(raw)
        error = error.get("error", error) if isinstance(error, dict) else error
        message = error.get("message") if isinstance(error, dict) else error
    except msgspec.DecodeError:
        message = raw.decode(errors="replace")
    retry = response.headers.get("retry-after")
    return Failure(
        f"the upstream answered {response.status_code}: {quoted(message)}",
        status=response.status_code,
        retry=float(retry) if retry and retry.isdigit() else None,
    )
